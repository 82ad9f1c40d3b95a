// convapi dashboard: copy buttons. Every page works without this file; with it, a button with
// data-copy="#id" copies the text of that element to the clipboard.
(function () {
  'use strict';
  document.addEventListener('click', function (event) {
    var button = event.target.closest && event.target.closest('button[data-copy]');
    if (!button) return;
    var source = document.querySelector(button.getAttribute('data-copy'));
    if (!source || !navigator.clipboard) return;
    var label = button.textContent;
    navigator.clipboard.writeText(source.textContent).then(function () {
      button.textContent = 'Copied';
      setTimeout(function () { button.textContent = label; }, 1500);
    }, function () {
      button.textContent = 'Copy failed';
      setTimeout(function () { button.textContent = label; }, 1500);
    });
  });
})();
