// Site-wide behaviour, loaded on every page (a file, not inline: the CSP allows it).
// Destructive forms carry data-confirm="question": nothing is sent unless confirmed.
document.addEventListener("submit", (event) => {
  const question = event.target.dataset && event.target.dataset.confirm;
  if (question && !window.confirm(question)) {
    event.preventDefault();
  }
}, true);
