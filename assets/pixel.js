/*! convapi pixel, see README */
(function (w, d, n) {
// g(): never throw into the host page
function g(f) { return function () { try { return f.apply(this, arguments) } catch (e) {} } }
var S = w.svc, Q = S && S.q || [], L = w.location, C = w.crypto, B = [], K = {}, sid = null, R, Z, tid, vid, T, last, s, i, m, url;
if (S && S.v) return; // loaded twice
try {
  s = d.currentScript;
  for (m = d.scripts, i = m.length; !s && i--;) /\/pixel\.js([?#]|$)/.test(m[i].src) && (s = m[i]);
  // beside our src: any host and path prefix
  url = new URL(s ? 'api/collect' : '/api/collect', s ? s.src : L.href).href;
  try { m = /(?:^|;\s*)_svc_vid=([\w-]{1,128})(;|$)/.exec(d.cookie) } catch (e) { m = 0 }
  vid = m ? m[1] : C.randomUUID ? C.randomUUID() : [].map.call(C.getRandomValues(new Uint8Array(16)),
    x => (x + 256).toString(16).slice(1)).join('');
} catch (e) { return }
function ck(x) { // 13 months; x: delete it
  try { d.cookie = '_svc_vid=' + vid + '; max-age=' + (x ? 0 : 34214400) + '; path=/; SameSite=Lax' + (L.protocol == 'https:' ? '; Secure' : ''); Z && sc(x) } catch (e) {}
}
// Shopify (Z): cart attribute svc_vid, once a visitor and cart; x: blank it
function sc(x) {
  var l = w.localStorage, v = x ? '' : vid, c = () => v && v + d.cookie.match(/(^|; )cart=[^;]*/), f = g(r => l._svc_cart = r && r.ok && (x || ok()) ? c() : 1);
  (l._svc_cart || '') != c() && (l._svc_cart = c(), fetch('/cart/update.js', { method: 'POST',
    headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ attributes: { svc_vid: v } }) }).then(f, f));
}
// consent k: as given, else granted unless required (R)
function ok(k = 'analytics') { return K[k] == null ? !R : K[k] }
function jar() { // ad cookies, as consent allows
  var o = {};
  try {
    d.cookie.split(/; */).forEach(c => {
      var k = c.split('=')[0];
      /^_(fb[pc]|ga(_\w+)?)$/.test(k) && ok(k[1] == 'f' ? 'ads' : 'analytics') && (o[k] = c.slice(k.length + 1));
    });
  } catch (e) {}
  return o;
}
function push(e) {
  e.ts = Date.now();
  B.length < 1e3 && B.push(e); // bounded until init
  sched();
}
function sched() { tid && (B.length > 19 ? flush() : B[0] && !T && (T = setTimeout(g(flush), 1e3))) }
function pv(f) { // anchor jumps (#) are no pageviews
  var h = L.href, k = h.split('#')[0];
  if (f || k != last) push({ type: 'pageview', url: h, referrer: last || d.referrer }), last = k;
}
function flush(b) { // b: page going away
  clearTimeout(T); T = 0;
  var c = [], z = 0, k = [];
  tid && B.splice(0).forEach(e => { // <= 100 events, ~16k chars (beacon cap 64 KiB)
    // identify waits while analytics consent is unknown
    if (e.type == 'identify' && !ok()) return K.analytics == null && k.push(e);
    var l = JSON.stringify(e).length;
    if (c[0] && (c.length > 99 || z + l > 16e3)) send(c, b), c = [], z = 0;
    c.push(e); z += l;
  });
  c[0] && send(c, b);
  tid && (B = k);
}
function send(ev, b) {
  var body = JSON.stringify({ trackerId: tid, visitorId: vid, consent: K, cookies: jar(), events: ev });
  try { if (b && n.sendBeacon(url, body)) return } catch (e) {} // string: text/plain, no preflight
  fetch(url, { method: 'POST', body: body, keepalive: true, headers: { 'Content-Type': 'text/plain' } })
    .then(r => r.json().then(g(j => {
      if (r.ok) {
        sid = j.sessionId || sid;
        j.consent == 'required' && !R && (R = 1, ok() || ck(1));
        j.visitorId && j.visitorId != vid && (vid = j.visitorId, ok() && ck());
      } else if (r.status == 400 && ev[j.index]) ev.splice(j.index, 1), ev[0] && send(ev); // drop the bad one
    }))).catch(g());
}
var api = g((c, a, p) => {
  if (c == 'sessionId') return sid;
  if (c == 'visitorId') return ok() ? vid : null;
  if (c == 'init') !tid && a && (tid = '' + a, R = p && p.consent == 'required', Z = p && p.shopifyCart, sched());
  if (c == 'consent' && a) {
    ['analytics', 'ads'].forEach(k => a[k] != null && (K[k] = !!a[k]));
    ok() ? ck() : K.analytics === false && ck(1);
    sched();
  }
  // p: the backend's HMAC of the user id
  if (c == 'identify' && a != null && a !== '') push({ type: 'identify', userId: '' + a, signature: p ? '' + p : void 0 });
  if (c != 'track' || !a) return;
  if (a == 'pageview') pv(1);
  else if (a != 'purchase') push({ type: 'event', name: '' + a, props: p && typeof p == 'object' ? JSON.parse(JSON.stringify(p)) : void 0 });
  else if (p && p.orderId != null && p.orderId !== '') push({
    type: 'purchase', orderId: '' + p.orderId, value: p.value == null ? p.value : +p.value,
    currency: p.currency ? ('' + p.currency).toUpperCase() : void 0
  });
});
api.v = 1;
g(() => {
  pv();
  for (i = 0; i < Q.length; i++) api.apply(w, Q[i]);
  ok() && ck();
  w.svc = api;
  var H = w.history, nav = g(() => pv()), on = 'addEventListener';
  ['pushState', 'replaceState'].forEach(k => {
    var o = H[k];
    H[k] = function () { var r = o.apply(this, arguments); nav(); return r };
  });
  w[on]('popstate', nav);
  w[on]('pagehide', g(() => flush(1)));
  d[on]('visibilitychange', g(() => d.visibilityState == 'hidden' && flush(1)));
})();
})(window, document, navigator);
