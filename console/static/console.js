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
