// The live tail: one EventSource on the node's journal stream; each record becomes a line at
// the top of #tail (text only, never markup), the newest 50 kept.
(function () {
  "use strict";
  var KEPT = 50;
  function describe(record) {
    var parts = [record.kind];
    if (record.schema) parts.push(record.schema);
    if (record.workflow) parts.push(record.workflow);
    if (record.effect) parts.push(record.effect);
    if (record.action) parts.push(record.action);
    if (record.code) parts.push(record.code);
    return parts.join("  ");
  }
  function start() {
    var list = document.getElementById("tail");
    if (!list || list.dataset.started) return;
    list.dataset.started = "1";
    var status = document.getElementById("tail-status");
    var source = new EventSource(list.dataset.root + "/v1/journal/stream?after=" + encodeURIComponent(list.dataset.after));
    source.onopen = function () { if (status) status.textContent = "live"; };
    source.onerror = function () { if (status) status.textContent = "reconnecting"; };
    source.addEventListener("record", function (message) {
      var entry = JSON.parse(message.data);
      var item = document.createElement("li");
      item.className = "mono";
      var link = document.createElement("a");
      link.href = list.dataset.root + "/ui/records/" + entry.seq;
      link.textContent = "#" + entry.seq;
      item.appendChild(link);
      item.appendChild(document.createTextNode("  " + describe(entry.record)));
      list.insertBefore(item, list.firstChild);
      while (list.children.length > KEPT) list.removeChild(list.lastChild);
    });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
