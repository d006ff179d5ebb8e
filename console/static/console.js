// The parts of a page that update themselves (hx-get every few seconds) show what an error
// answer says (a group deleted meanwhile: its 404; a cluster that stopped answering: its 502)
// instead of keeping their last figures, which htmx does for an error answer; the next good
// answer replaces it.
document.addEventListener("htmx:beforeSwap", function (event) {
  if (event.detail.xhr.status < 400) return;
  var page = new DOMParser().parseFromString(event.detail.serverResponse, "text/html");
  var main = page.querySelector("main");
  if (!main) return;
  // The page's own chrome (the login note, the back link) is not part of the error.
  main.querySelectorAll("#auth-note, a[href^='javascript:']").forEach(function (e) {
    e.remove();
  });
  event.detail.shouldSwap = true;
  event.detail.isError = false;
  event.detail.serverResponse = main.innerHTML;
});

// A group's reset and skip forms pick among the topics the group has offsets on: kept as the
// live part lists them (its #live-topics), so a topic it started consuming after the page
// loaded (a static topic just created, say) can be picked without a reload; the topic picked
// stays picked while it is listed.
document.addEventListener("htmx:afterSwap", function () {
  var listed = document.getElementById("live-topics");
  if (!listed) return;
  var topics = Array.prototype.map.call(listed.options, function (o) { return o.value; });
  document.querySelectorAll("select.group-topics").forEach(function (select) {
    var now = Array.prototype.map.call(select.options, function (o) { return o.value; });
    if (now.join("\n") === topics.join("\n")) return;
    var picked = select.value;
    select.replaceChildren.apply(select, topics.map(function (t) {
      var option = document.createElement("option");
      option.value = option.textContent = t;
      return option;
    }));
    if (topics.indexOf(picked) >= 0) select.value = picked;
  });
  var forms = document.getElementById("reset-forms");
  var none = document.getElementById("no-reset");
  if (forms) forms.hidden = topics.length === 0;
  if (none) none.hidden = topics.length > 0;
});
