/*
 * Charts of the Kernel Portfolio site.
 *
 * Every chart is a <div class="kp-chart"> holding its plotly figure as JSON,
 * either inline (<template class="kp-chart-figure">, from notebooks) or in a
 * file next to the page (data-src, from generated pages). This script draws
 * them with the site's own plotly.js (its cartesian bundle, loaded once, only
 * on pages that have a chart) after a hard load and after every instant navigation, and offers
 * each figure's data for download. A chart that cannot be drawn says so in
 * place and logs an error: never a blank box.
 */
(function () {
  "use strict";

  var plotlyUrl = new URL("plotly-cartesian.min.js", document.currentScript.src).href;
  var plotlyLoading = null;
  // plotly.js inserts its CSS rules into a <style> of <head> once, when it loads;
  // Material's instant navigation drops that element with the old page's head.
  var PLOTLY_STYLE = "plotly.js-style-global";
  var plotlyCss = null;

  function keepPlotlyCss() {
    var style = document.getElementById(PLOTLY_STYLE);
    if (style && style.sheet) {
      plotlyCss = Array.prototype.map
        .call(style.sheet.cssRules, function (rule) { return rule.cssText; })
        .join("\n");
    }
  }

  function restorePlotlyCss() {
    if (plotlyCss === null || document.getElementById(PLOTLY_STYLE)) {
      return;
    }
    var style = document.createElement("style");
    style.id = PLOTLY_STYLE;
    style.textContent = plotlyCss;
    document.head.appendChild(style);
  }

  function loadPlotly() {
    if (window.Plotly) {
      return Promise.resolve(window.Plotly);
    }
    if (!plotlyLoading) {
      plotlyLoading = new Promise(function (resolve, reject) {
        var script = document.createElement("script");
        script.src = plotlyUrl;
        script.onload = function () {
          keepPlotlyCss();
          resolve(window.Plotly);
        };
        script.onerror = function () {
          plotlyLoading = null;
          reject(new Error("cannot load " + plotlyUrl));
        };
        document.head.appendChild(script);
      });
    }
    return plotlyLoading;
  }

  function readFigure(div) {
    var inline = div.querySelector("template.kp-chart-figure");
    if (inline) {
      return Promise.resolve(JSON.parse(inline.content.textContent));
    }
    var url = new URL(div.dataset.src, document.baseURI).href;
    return fetch(url).then(function (response) {
      if (!response.ok) {
        throw new Error("cannot fetch " + url + ": HTTP " + response.status);
      }
      return response.json();
    });
  }

  function addDownload(div, figure) {
    if (div.dataset.src) {
      return; // generated pages link their JSON file in the page itself
    }
    var blob = new Blob([JSON.stringify(figure)], { type: "application/json" });
    var link = document.createElement("a");
    link.className = "kp-chart-download";
    link.href = URL.createObjectURL(blob);
    link.download = (div.dataset.name || "chart") + ".json";
    link.textContent = "Chart data (JSON)";
    div.appendChild(link);
  }

  function draw(div) {
    div.dataset.kpState = "loading";
    return Promise.all([loadPlotly(), readFigure(div)])
      .then(function (loaded) {
        var Plotly = loaded[0];
        var figure = loaded[1];
        var plot = document.createElement("div");
        plot.className = "kp-chart-plot";
        div.insertBefore(plot, div.firstChild);
        return Plotly.newPlot(plot, figure.data || [], figure.layout || {}, {
          responsive: true,
          displaylogo: false,
        }).then(function () {
          addDownload(div, figure);
          div.dataset.kpState = "drawn";
        });
      })
      .catch(function (error) {
        div.dataset.kpState = "error";
        var message = document.createElement("p");
        message.className = "kp-chart-error";
        message.textContent = "This chart could not be drawn: " + error.message;
        div.appendChild(message);
        console.error("kp chart " + (div.dataset.name || ""), error);
      });
  }

  function drawAll() {
    restorePlotlyCss();
    document.querySelectorAll("div.kp-chart:not([data-kp-state])").forEach(draw);
  }

  if (window.document$) {
    window.document$.subscribe(drawAll); // hard load and every instant navigation
  } else {
    document.addEventListener("DOMContentLoaded", drawAll);
  }
})();
