// The inspector's actions (templates/actions.html): each form.action is sent with fetch to the
// JSON API route it names, as a JSON body of its named fields, with the page's token in the
// header the page names beside the session cookie (the cookie alone authenticates reads only,
// spec/04 §9.8). The answer, or the refusal's code and message, is shown as text, never markup;
// a done action reloads the page (or opens the execution it started).
(function () {
  "use strict";
  function body(form) {
    var found = {};
    var fields = form.querySelectorAll("[name]");
    for (var i = 0; i < fields.length; i++) {
      var field = fields[i];
      var value = field.value;
      if (field.dataset.optional !== undefined && value.trim() === "") continue;
      if (field.dataset.json !== undefined) {
        try {
          value = JSON.parse(value.trim() === "" ? "null" : value);
        } catch (error) {
          throw new Error(field.name + " is not JSON: " + error.message);
        }
      }
      found[field.name] = value;
    }
    return found;
  }
  function show(form, text, failed) {
    var result = form.querySelector(".action-result");
    result.textContent = text;
    result.className = "action-result " + (failed ? "failed" : "done");
  }
  function done(form, answer) {
    if (form.dataset.then === "execution" && answer && answer.exec) {
      window.location.assign(form.dataset.root + "/ui/flows/executions/" + answer.exec);
      return;
    }
    window.location.reload();
  }
  function refused(form, response, answer) {
    var error = (answer && answer.error) || { code: "http." + response.status, message: response.statusText };
    show(form, error.code + ": " + error.message + (error.hint ? " (" + error.hint + ")" : ""), true);
  }
  function send(event) {
    event.preventDefault();
    var form = event.target;
    var meta = document.querySelector('meta[name="aos-page-token"]');
    var payload;
    try {
      payload = body(form);
    } catch (error) {
      show(form, error.message, true);
      return;
    }
    var headers = { "content-type": "application/json" };
    headers[meta.dataset.header] = meta.content;
    var button = form.querySelector("button[type=submit]");
    button.disabled = true;
    show(form, "sending", false);
    fetch(form.dataset.path, { method: "POST", credentials: "same-origin", headers: headers, body: JSON.stringify(payload) })
      .then(function (response) {
        return response.json().then(
          function (answer) { return [response, answer]; },
          function () { return [response, null]; }
        );
      })
      .then(function (pair) {
        if (pair[0].ok) {
          show(form, "done", false);
          done(form, pair[1]);
          return;
        }
        refused(form, pair[0], pair[1]);
        button.disabled = false;
      }, function (error) {
        show(form, "the node did not answer: " + error.message, true);
        button.disabled = false;
      });
  }
  function start() {
    var forms = document.querySelectorAll("form.action");
    for (var i = 0; i < forms.length; i++) forms[i].addEventListener("submit", send);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
