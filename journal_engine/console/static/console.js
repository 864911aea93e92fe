// journal-engine console: the little script the pages use (live counts, body tabs, select all, confirm).
"use strict";
(function () {
  function liveQueues() {
    var table = document.getElementById("queues");
    if (!table || table.dataset.live !== "yes") return;
    var stamp = document.getElementById("live-at");
    function refresh() {
      fetch("/api/queues", {credentials: "same-origin", cache: "no-store"}).then(function (answer) {
        if (!answer.ok) throw new Error(answer.status);
        return answer.json();
      }).then(function (data) {
        data.queues.forEach(function (queue) {
          var row = table.querySelector('tr[data-queue="' + CSS.escape(queue.name) + '"]');
          if (!row) return;
          ["depth", "scheduled", "delivering", "consumers", "added", "acknowledged", "killed"].forEach(function (name) {
            var cell = row.querySelector('[data-field="' + name + '"]');
            if (cell) cell.textContent = queue[name];
          });
          ["send", "ack", "dead"].forEach(function (name) {
            var cell = row.querySelector('[data-field="' + name + '"]');
            if (cell && queue.rates) cell.textContent = queue.rates[name].toFixed(1);
          });
        });
        if (stamp) stamp.textContent = "updated " + new Date(data.at).toISOString().substring(11, 19) + " UTC";
      }).catch(function (error) {
        if (stamp) stamp.textContent = "update failed (" + error.message + ")";
      });
    }
    setInterval(refresh, 2000);
  }
  function tabs() {
    document.querySelectorAll("[data-tabs]").forEach(function (box) {
      box.querySelectorAll("button[data-tab]").forEach(function (button) {
        button.addEventListener("click", function () {
          box.querySelectorAll("button[data-tab]").forEach(function (other) { other.classList.toggle("on", other === button); });
          box.querySelectorAll("[data-panel]").forEach(function (panel) { panel.hidden = panel.dataset.panel !== button.dataset.tab; });
        });
      });
    });
  }
  function selectAll() {
    document.querySelectorAll("[data-select-all]").forEach(function (box) {
      box.addEventListener("change", function () {
        box.closest("form").querySelectorAll('input[type=checkbox][name=id]').forEach(function (one) { one.checked = box.checked; });
      });
    });
  }
  function confirmations() {
    document.querySelectorAll("button[data-confirm]").forEach(function (button) {
      button.addEventListener("click", function (event) {
        if (!window.confirm(button.dataset.confirm)) event.preventDefault();
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { liveQueues(); tabs(); selectAll(); confirmations(); });
})();
