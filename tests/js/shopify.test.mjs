// The pixel's Shopify option (docs/shopify.md): `svc('init', id, {shopifyCart: true})` writes the
// visitor id into the cart attribute `svc_vid` through Shopify's cart AJAX API, once a visitor and
// cart, only with analytics consent. Run with `node --test tests/js/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browser, settle, ok, localStorage, STUB } from './harness.mjs';

const ON = `svc('init', 'TRK', {shopifyCart: true})`;

// One page load of a visitor: the cookie jar and localStorage carried over from `prev`.
async function page(setup, { prev, cookie = '', storage = prev ? prev.storage : localStorage(), cart } = {}) {
  const b = browser({ cookie: prev ? prev.cookie : cookie, storage, cart });
  b.run(STUB);
  b.run(setup);
  b.load();
  b.tick();
  await settle();
  return b;
}

const attribute = (call) => {
  assert.equal(call.url, '/cart/update.js');
  assert.equal(call.init.method, 'POST');
  assert.equal(call.init.headers['Content-Type'], 'application/json');
  assert.deepEqual(Object.keys(call.json), ['attributes']);
  return call.json.attributes.svc_vid;
};

test('on: the visitor id goes to the cart attribute svc_vid once, the same id the pixel sends', async () => {
  const b = await page(ON, { cookie: 'cart=c1-aaa?key=k1' });
  assert.equal(b.rec.carts.length, 1);
  const vid = b.rec.fetches[0].json.visitorId;
  assert.equal(attribute(b.rec.carts[0]), vid);
  assert.equal(b.svc('visitorId'), vid);
  b.svc('consent', { analytics: true, ads: true });
  b.svc('track', 'pageview');
  b.tick();
  await settle();
  assert.equal(b.rec.carts.length, 1, 'not again on the same page');
  const next = await page(ON, { prev: b });
  assert.equal(next.rec.fetches[0].json.visitorId, vid);
  assert.equal(next.rec.carts.length, 0, 'nor on the next page load: same visitor, same cart');
});

test('off by default: no cart call, whatever the consent', async () => {
  for (const setup of [`svc('init', 'TRK')`, `svc('init', 'TRK', {consent: 'required'}); svc('consent', {analytics: true})`,
    `svc('init', 'TRK', {shopifyCart: false})`]) {
    const b = await page(setup, { cookie: 'cart=c1-aaa?key=k1' });
    assert.equal(b.rec.fetches.length, 1, setup);
    assert.equal(b.rec.carts.length, 0, setup);
    assert.deepEqual({ ...b.storage }, {}, `nothing stored: ${setup}`);
  }
});

test('a new cart (after a checkout) gets the attribute again; so does a new visitor id', async () => {
  const first = await page(ON, { cookie: 'cart=c1-aaa?key=k1' });
  const vid = attribute(first.rec.carts[0]);
  first.document.cookie = 'cart=c1-bbb?key=k2; path=/';
  const second = await page(ON, { prev: first });
  assert.equal(second.rec.carts.length, 1, 'the new cart');
  assert.equal(attribute(second.rec.carts[0]), vid);
  const third = await page(ON, { prev: second });
  assert.equal(third.rec.carts.length, 0);

  // The server answers another visitor id: the pixel adopts it, and the cart follows.
  const b = browser({ cookie: third.cookie, storage: third.storage,
    respond: () => ok({ visitorId: 'server-vid', sessionId: 's1', accepted: 1 }) });
  b.run(STUB);
  b.run(ON);
  b.load();
  assert.equal(b.rec.carts.length, 0);
  b.tick();
  await settle();
  assert.equal(b.svc('visitorId'), 'server-vid');
  assert.deepEqual(b.rec.carts.map(attribute), ['server-vid']);
});

test('the cart Shopify makes for the call is the one remembered', async () => {
  // No cart cookie yet: /cart/update.js makes the cart and sets its cookie.
  const cart = (call, b) => { b.document.cookie = 'cart=c1-new?key=k9; path=/'; return ok({ token: 'c1-new?key=k9' }); };
  const first = await page(ON, { cart });
  assert.equal(first.rec.carts.length, 1);
  const next = await page(ON, { prev: first });
  assert.equal(next.rec.carts.length, 0, 'that cart already has the attribute');
});

test('a failed cart call is tried again on the next page load', async () => {
  for (const cart of [() => ok({ message: 'busy' }, 500), () => Promise.reject(new TypeError('offline'))]) {
    const first = await page(ON, { cookie: 'cart=c1-aaa?key=k1', cart });
    assert.equal(first.rec.carts.length, 1);
    const next = await page(ON, { prev: first });
    assert.equal(next.rec.carts.length, 1, 'again');
    const third = await page(ON, { prev: next });
    assert.equal(third.rec.carts.length, 0, 'until it went through');
  }
});

test('consent required: no cart call before analytics consent, one after it', async () => {
  const b = await page(`svc('init', 'TRK', {consent: 'required', shopifyCart: true})`, { cookie: 'cart=c1-aaa?key=k1' });
  assert.equal(b.rec.carts.length, 0, 'no id leaves the page for the cart');
  b.svc('consent', { ads: true });
  assert.equal(b.rec.carts.length, 0, 'ads consent alone is not enough');
  b.svc('consent', { analytics: true });
  await settle();
  assert.equal(b.rec.carts.length, 1);
  assert.equal(attribute(b.rec.carts[0]), b.svc('visitorId'));
  b.svc('consent', { analytics: true });
  assert.equal(b.rec.carts.length, 1, 'once');
});

test('analytics consent withdrawn: the attribute is blanked once and nothing of the id stays stored', async () => {
  const b = await page(ON, { cookie: 'cart=c1-aaa?key=k1' });
  const vid = attribute(b.rec.carts[0]);
  assert.ok(Object.values(b.storage).some((v) => v.includes(vid)));
  b.svc('consent', { analytics: false });
  await settle();
  assert.equal(b.rec.carts.length, 2);
  assert.equal(attribute(b.rec.carts[1]), '', 'Shopify removes an attribute set blank');
  assert.ok(!Object.values(b.storage).some((v) => v.includes(vid)), 'the id is gone from localStorage');
  assert.doesNotMatch(b.cookie, /_svc_vid/);
  // The next page still denies: nothing more to take back.
  const next = await page(`${ON}; svc('consent', {analytics: false})`, { prev: b });
  assert.equal(next.rec.carts.length, 0);
  // A visitor who never allowed it: no call at all.
  const never = await page(`${ON}; svc('consent', {analytics: false})`, { cookie: 'cart=c1-aaa?key=k1' });
  assert.equal(never.rec.carts.length, 0);
});

test('consent withdrawn while the cart call is in flight: the id is not stored after it', async () => {
  const pending = [];
  const b = await page(ON, { cookie: 'cart=c1-aaa?key=k1', cart: () => new Promise((r) => pending.push(r)) });
  assert.equal(b.rec.carts.length, 1);
  const vid = attribute(b.rec.carts[0]);
  b.svc('consent', { analytics: false });
  await settle();
  assert.deepEqual(b.rec.carts.map(attribute), [vid, '']);
  // Shopify answers the blank first, then the id.
  pending[1](ok({}));
  await settle();
  pending[0](ok({}));
  await settle();
  assert.ok(!Object.values(b.storage).some((v) => v.includes(vid)), 'the late answer stores no id');
  // Shopify may have applied the two calls in either order: the next denial blanks it again.
  const next = await page(`${ON}; svc('consent', {analytics: false})`, { prev: b });
  assert.deepEqual(next.rec.carts.map(attribute), ['']);
});

test("the server's answer that consent is required blanks an attribute set before it", async () => {
  const b = browser({ cookie: 'cart=c1-aaa?key=k1',
    respond: (call) => ok({ visitorId: null, sessionId: 's1', accepted: call.json.events.length, consent: 'required' }) });
  b.run(STUB);
  b.run(ON);
  b.load();
  await settle();
  assert.equal(b.rec.carts.length, 1, 'set: the pixel did not know yet');
  b.tick();
  await settle();
  assert.deepEqual(b.rec.carts.map(attribute), [b.rec.fetches[0].json.visitorId, '']);
  assert.equal(b.svc('visitorId'), null);
});

test('blocked storage: no cart call, the pixel still works', async () => {
  const b = await page(ON, { cookie: 'cart=c1-aaa?key=k1', storage: null });
  assert.equal(b.rec.carts.length, 0);
  assert.equal(b.rec.fetches.length, 1);
  assert.match(b.cookie, /_svc_vid=/);
});
