// Queue and batching semantics of assets/pixel.js, driven only through `svc(...)` and DOM events
// in the fake browser of harness.mjs. Run with `node --test tests/js/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browser, settle, ok, SNIPPET, STUB } from './harness.mjs';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;
const strip = (evs) => evs.map(({ ts, ...e }) => e);

test('calls queued before load (identify before init) are replayed in order and sent in the first batch', async () => {
  const b = browser();
  b.run(STUB);
  b.run(`svc('identify', 'user-42'); svc('init', 'TRK'); svc('track', 'add_to_cart', {sku: 'X'});
         svc('track', 'purchase', {orderId: 'A-1001', value: '49.90', currency: 'EUR', junk: 1});`);
  assert.equal(b.win.svc.q.length, 4, 'the stub queues');
  const before = Date.now();
  b.load();
  assert.notEqual(b.win.svc.q?.length, 4, 'window.svc is replaced by the real function');
  assert.equal(b.rec.fetches.length, 0, 'batched, not sent at once');
  assert.equal(b.rec.timers.length, 1, 'one flush timer');
  assert.ok(b.rec.timers[0].ms <= 2000, 'short flush delay');
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 1, 'one batch');
  const { url, init, json } = b.rec.fetches[0];
  assert.equal(url, 'https://collect.example/api/collect');
  assert.equal(init.method, 'POST');
  assert.equal(init.headers['Content-Type'], 'text/plain', 'text/plain avoids a CORS preflight');
  assert.equal(json.trackerId, 'TRK');
  assert.match(json.visitorId, UUID);
  assert.deepEqual(strip(json.events), [
    { type: 'pageview', url: 'https://shop.example/p?utm_source=news', referrer: 'https://mail.example/' },
    { type: 'identify', userId: 'user-42' },
    { type: 'event', name: 'add_to_cart', props: { sku: 'X' } },
    { type: 'purchase', orderId: 'A-1001', value: 49.9, currency: 'EUR' },
  ]);
  for (const e of json.events) {
    assert.equal(typeof e.ts, 'number');
    assert.ok(e.ts >= before && e.ts <= Date.now(), 'ts is epoch millis');
  }
});

test('the exact pasted snippet works: init then a pageview', async () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 1);
  assert.equal(b.rec.fetches[0].json.trackerId, 'TRACKER_ID');
  assert.deepEqual(b.sentEvents().map((e) => e.type), ['pageview']);
});

test('nothing is sent before init; events wait for it', async () => {
  const b = browser();
  b.run(STUB);
  b.run(`svc('identify', 'u1')`);
  b.load();
  b.svc('track', 'signup');
  b.tick();
  b.fire('window', 'pagehide');
  b.hide();
  await settle();
  assert.equal(b.rec.fetches.length + b.rec.beacons.length, 0, 'no tracker id, nothing sent');
  b.svc('init', 'TRK');
  b.svc('init', 'OTHER'); // a second init is ignored
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 1);
  assert.equal(b.rec.fetches[0].json.trackerId, 'TRK');
  assert.deepEqual(b.sentEvents().map((e) => e.type), ['pageview', 'identify', 'event']);
});

test('pagehide flushes with sendBeacon and a text/plain body', async () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  b.svc('track', 'purchase', { orderId: 'A-1', value: 10, currency: 'USD' });
  b.fire('window', 'pagehide', { persisted: false });
  await settle();
  assert.equal(b.rec.fetches.length, 0, 'no fetch when the beacon was queued');
  assert.equal(b.rec.beacons.length, 1);
  const { url, body } = b.rec.beacons[0];
  assert.equal(url, 'https://collect.example/api/collect');
  // A string body is sent as text/plain;charset=UTF-8 (Beacon spec): a CORS-safelisted type, no preflight.
  assert.equal(typeof body, 'string');
  const json = JSON.parse(body);
  assert.equal(json.trackerId, 'TRACKER_ID');
  assert.deepEqual(json.events.map((e) => e.type), ['pageview', 'purchase']);
  assert.equal(b.rec.timers.length, 0, 'pending flush timer cancelled');
  b.tick();
  b.fire('window', 'pagehide');
  await settle();
  assert.equal(b.rec.beacons.length + b.rec.fetches.length, 1, 'nothing is sent twice');
});

test('a purchase currency is sent in upper case: the server refuses any other case', async () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  b.svc('track', 'purchase', { orderId: 'A-2', value: 10, currency: 'eur' });
  b.fire('window', 'pagehide', { persisted: false });
  await settle();
  const json = JSON.parse(b.rec.beacons[0].body);
  assert.equal(json.events.find((e) => e.type === 'purchase').currency, 'EUR');
});

test('visibilitychange to hidden flushes with sendBeacon; visible does not', async () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  b.fire('document', 'visibilitychange'); // still visible
  assert.equal(b.rec.beacons.length, 0);
  b.hide();
  assert.equal(b.rec.beacons.length, 1);
  assert.equal(JSON.parse(b.rec.beacons[0].body).events[0].type, 'pageview');
});

test('no exception when sendBeacon is missing: fetch with keepalive is used', async () => {
  const b = browser({ beacon: null });
  b.run(SNIPPET);
  b.load();
  b.svc('identify', 'u9');
  assert.doesNotThrow(() => b.fire('window', 'pagehide'));
  await settle();
  assert.equal(b.rec.fetches.length, 1);
  const { init, json } = b.rec.fetches[0];
  assert.equal(init.keepalive, true);
  assert.equal(init.method, 'POST');
  assert.equal(init.headers['Content-Type'], 'text/plain');
  assert.deepEqual(json.events.map((e) => e.type), ['pageview', 'identify']);
});

test('sendBeacon returning false or throwing falls back to fetch keepalive', async () => {
  for (const beacon of [() => false, () => { throw new TypeError('quota'); }]) {
    const b = browser({ beacon });
    b.run(SNIPPET);
    b.load();
    assert.doesNotThrow(() => b.hide());
    await settle();
    assert.equal(b.rec.beacons.length, 1, 'beacon tried first');
    assert.equal(b.rec.fetches.length, 1, 'then fetch');
    assert.equal(b.rec.fetches[0].init.keepalive, true);
  }
});

test('nothing throws and nothing is left unhandled when fetch rejects or throws', async () => {
  const unhandled = [];
  const onUnhandled = (e) => unhandled.push(e);
  process.on('unhandledRejection', onUnhandled);
  try {
    for (const respond of [
      () => Promise.reject(new TypeError('Failed to fetch')),
      () => { throw new Error('sync'); },
      () => ({ ok: true, status: 200, json: () => Promise.reject(new SyntaxError('not json')) }),
      () => ok(null),
      () => ok({ error: 'boom', code: 'INTERNAL' }, 500),
    ]) {
      const b = browser({ respond, beacon: null });
      b.run(SNIPPET);
      assert.doesNotThrow(() => b.load());
      assert.doesNotThrow(() => b.tick());
      await settle();
      assert.equal(b.rec.fetches.length, 1);
      assert.equal(b.svc('sessionId'), null);
      b.svc('track', 'later');
      assert.doesNotThrow(() => b.fire('window', 'pagehide'));
      await settle();
      assert.equal(b.rec.fetches.length, 2, 'keeps working after a failure');
    }
    // fetch itself missing or throwing synchronously
    const b = browser({ beacon: null });
    b.win.fetch = () => { throw new TypeError('blocked'); };
    b.run(SNIPPET);
    b.load();
    assert.doesNotThrow(() => b.tick());
    assert.doesNotThrow(() => b.fire('window', 'pagehide'));
  } finally {
    await settle();
    process.off('unhandledRejection', onUnhandled);
  }
  assert.deepEqual(unhandled, []);
});

test('svc never throws on odd calls', () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  for (const args of [[], ['nope'], ['track'], ['track', null], ['track', 'purchase'], ['track', 'purchase', 'x'],
    ['track', 'purchase', { value: 3 }], ['identify'], ['identify', ''], ['init'], [{}], ['track', 'e', 42]]) {
    assert.doesNotThrow(() => b.svc(...args), JSON.stringify(args));
  }
  b.tick();
  const evs = b.sentEvents();
  // a purchase without orderId is dropped (the server would reject the whole batch); an event keeps only object props
  assert.deepEqual(strip(evs), [
    { type: 'pageview', url: 'https://shop.example/p?utm_source=news', referrer: 'https://mail.example/' },
    { type: 'event', name: 'e' },
  ]);
});

test('event props are snapshotted; unserializable props drop only that event', () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  const props = { sku: 'A' };
  b.svc('track', 'add_to_cart', props);
  props.sku = 'changed later';
  const cyclic = {};
  cyclic.self = cyclic;
  assert.doesNotThrow(() => b.svc('track', 'cyclic', cyclic));
  assert.doesNotThrow(() => b.svc('track', 'bigint', { n: 1n }));
  b.svc('identify', 'u1');
  b.tick();
  assert.deepEqual(strip(b.sentEvents()).slice(1), [
    { type: 'event', name: 'add_to_cart', props: { sku: 'A' } },
    { type: 'identify', userId: 'u1' },
  ]);
});

test('cookie _svc_vid: minted, 13 months, SameSite=Lax, Secure on https', () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  assert.equal(b.rec.cookieWrites.length, 1);
  const attrs = b.rec.cookieWrites[0].split('; ');
  const [name, value] = attrs[0].split('=');
  assert.equal(name, '_svc_vid');
  assert.match(value, UUID, 'crypto.randomUUID');
  const maxAge = Number(attrs.find((a) => a.startsWith('max-age=')).slice(8));
  const days = maxAge / 86400;
  assert.ok(days >= 390 && days <= 400, `13 months (<= 400 days, the browsers' cap), got ${days} days`);
  assert.ok(attrs.includes('path=/'));
  assert.ok(attrs.includes('SameSite=Lax'));
  assert.ok(attrs.includes('Secure'));
  b.tick();
  assert.equal(b.rec.fetches[0].json.visitorId, value, 'the cookie value is sent as visitorId');

  const h = browser({ href: 'http://shop.example/' });
  h.run(SNIPPET);
  h.load();
  assert.ok(!h.rec.cookieWrites[0].includes('Secure'), 'no Secure on http');
  assert.ok(h.rec.cookieWrites[0].includes('SameSite=Lax'));
});

test('an existing visitor cookie is kept and renewed', () => {
  const b = browser({ cookie: 'a=1; _svc_vid=v-existing_1; z=2' });
  b.run(SNIPPET);
  b.load();
  assert.match(b.rec.cookieWrites[0], /^_svc_vid=v-existing_1; /);
  b.tick();
  assert.equal(b.rec.fetches[0].json.visitorId, 'v-existing_1');
});

test('without crypto.randomUUID (plain http) the id comes from getRandomValues', () => {
  const ids = new Set();
  for (let i = 0; i < 20; i++) {
    const b = browser({ href: 'http://shop.example/', crypto: { getRandomValues: (a) => globalThis.crypto.getRandomValues(a) } });
    b.run(SNIPPET);
    b.load();
    b.tick();
    const vid = b.rec.fetches[0].json.visitorId;
    assert.match(vid, /^[0-9a-f]{32}$/);
    ids.add(vid);
  }
  assert.equal(ids.size, 20);
});

test('a visitorId returned by the server is adopted (cookie and next batch)', async () => {
  const b = browser({ cookie: '_svc_vid=old', respond: () => ok({ visitorId: 'server-vid', sessionId: 's1', accepted: 1 }) });
  b.run(SNIPPET);
  b.load();
  b.tick();
  await settle();
  assert.equal(b.rec.fetches[0].json.visitorId, 'old');
  assert.match(b.rec.cookieWrites.at(-1), /^_svc_vid=server-vid; max-age=/);
  assert.match(b.cookie, /_svc_vid=server-vid/);
  b.svc('track', 'x');
  b.tick();
  assert.equal(b.rec.fetches[1].json.visitorId, 'server-vid');
});

test("svc('sessionId') is null before, then the server's sessionId after a flush", async () => {
  let n = 0;
  const b = browser({ respond: (c) => ok({ visitorId: c.json.visitorId, sessionId: `sess-${++n}`, accepted: 1 }) });
  b.run(STUB);
  b.run(`svc('init', 'TRK')`);
  b.load();
  assert.equal(b.svc('sessionId'), null);
  b.tick();
  await settle();
  assert.equal(b.svc('sessionId'), 'sess-1');
  b.svc('track', 'x');
  b.tick();
  await settle();
  assert.equal(b.svc('sessionId'), 'sess-2', 'the last one');
});

test("svc('visitorId') is the id the pixel sends and keeps in its cookie, at once", async () => {
  const fresh = browser();
  fresh.run(SNIPPET);
  fresh.load();
  const vid = fresh.svc('visitorId');
  assert.match(vid, UUID);
  assert.match(fresh.cookie, new RegExp(`_svc_vid=${vid}`));
  fresh.tick();
  await settle();
  assert.equal(fresh.rec.fetches[0].json.visitorId, vid);

  const known = browser({ cookie: '_svc_vid=v-42' });
  known.run(STUB);
  known.run(`svc('init', 'TRK')`);
  known.load();
  assert.equal(known.svc('visitorId'), 'v-42', "the cookie's");
});

test('collector URL comes from the script src', () => {
  const cases = [
    [{ src: 'https://collect.example:8443/pixel.js?v=3' }, 'https://collect.example:8443/api/collect'],
    [{ src: 'http://127.0.0.1:9000/pixel.js' }, 'http://127.0.0.1:9000/api/collect'],
    [{ src: 'https://proxy.example/convapi/pixel.js' }, 'https://proxy.example/convapi/api/collect'],
    // async scripts may run without document.currentScript: find the tag ending in /pixel.js
    [{ currentScript: false, src: 'https://c2.example/pixel.js', scripts: ['https://cdn.example/app.js'] }, 'https://c2.example/api/collect'],
  ];
  for (const [opts, want] of cases) {
    const b = browser(opts);
    b.run(SNIPPET);
    b.load();
    b.fire('window', 'pagehide');
    assert.equal(b.rec.beacons[0].url, want, JSON.stringify(opts));
  }
});

test('at most 100 events per batch: 150 queued events go out as 100 + 51', async () => {
  const b = browser();
  b.run(STUB);
  b.load();
  for (let i = 0; i < 150; i++) b.svc('track', 'e' + i);
  assert.equal(b.rec.fetches.length, 0);
  b.svc('init', 'TRK'); // 151 events waiting: flushed at once
  await settle();
  const sizes = b.rec.fetches.map((f) => f.json.events.length);
  assert.deepEqual(sizes, [100, 51]);
  const names = b.sentEvents().map((e) => e.name ?? e.type);
  assert.deepEqual(names, ['pageview', ...Array.from({ length: 150 }, (_, i) => 'e' + i)], 'order kept across batches');
  for (const f of b.rec.fetches) assert.equal(f.json.trackerId, 'TRK');
});

test('a full buffer flushes at once when init arrives', () => {
  const b = browser();
  b.run(STUB);
  b.load();
  for (let i = 0; i < 120; i++) b.svc('identify', 'u' + i);
  b.run(`svc('init', 'TRK')`);
  const sizes = b.rec.fetches.map((f) => f.json.events.length);
  assert.deepEqual(sizes, [100, 21]);
});

test('the beacon path splits large batches too (64 KiB in-flight cap)', () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  const big = 'x'.repeat(7000);
  for (let i = 0; i < 3; i++) b.svc('track', 'big' + i, { big });
  b.fire('window', 'pagehide');
  const batches = b.rec.beacons.map((x) => JSON.parse(x.body));
  assert.deepEqual(batches.map((j) => j.events.map((e) => e.name ?? e.type)), [['pageview', 'big0', 'big1'], ['big2']]);
  for (const x of b.rec.beacons) assert.ok(x.body.length < 32000);
});

test('20 events flush without waiting for the timer', () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  for (let i = 0; i < 18; i++) b.svc('track', 'e' + i);
  assert.equal(b.rec.fetches.length, 0);
  b.svc('track', 'e18'); // 20th with the pageview
  assert.equal(b.rec.fetches.length, 1);
  assert.equal(b.rec.fetches[0].json.events.length, 20);
  assert.equal(b.rec.timers.length, 0);
});

test('history navigation: pageviews on pushState/replaceState/popstate, deduped', () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  b.history.pushState({}, '', '/cart');
  b.history.pushState({}, '', '/cart'); // same URL: no pageview
  b.history.pushState({}, '', '/cart#totals'); // fragment only: no pageview
  b.history.replaceState({}, '', '/checkout?step=1');
  b.back('/cart');
  b.fire('window', 'popstate'); // same URL again
  b.svc('track', 'pageview'); // explicit, always sent
  assert.equal(b.history.length, 4, 'the original pushState still runs');
  b.tick();
  const pvs = b.sentEvents().filter((e) => e.type === 'pageview').map(({ url, referrer }) => [url, referrer]);
  assert.deepEqual(pvs, [
    ['https://shop.example/p?utm_source=news', 'https://mail.example/'],
    ['https://shop.example/cart', 'https://shop.example/p?utm_source=news'],
    ['https://shop.example/checkout?step=1', 'https://shop.example/cart'],
    ['https://shop.example/cart', 'https://shop.example/checkout?step=1'],
    ['https://shop.example/cart', 'https://shop.example/cart'],
  ]);
});

test('a 400 naming a bad event resends the batch without it', async () => {
  const b = browser({
    respond: (c) => {
      const i = c.json.events.findIndex((e) => e.name === 'bad');
      return i >= 0 ? ok({ error: `events[${i}]: invalid`, code: 'VALIDATION_ERROR', index: i }, 400)
        : ok({ visitorId: c.json.visitorId, sessionId: 's', accepted: c.json.events.length });
    },
  });
  b.run(SNIPPET);
  b.load();
  b.svc('track', 'bad');
  b.svc('identify', 'u1');
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 2);
  assert.deepEqual(b.rec.fetches[1].json.events.map((e) => e.type), ['pageview', 'identify']);
  assert.equal(b.svc('sessionId'), 's');
});

test('loading the script twice does not double-send', () => {
  const b = browser();
  b.run(SNIPPET);
  b.load();
  const svc = b.win.svc;
  b.load();
  assert.equal(b.win.svc, svc);
  b.history.pushState({}, '', '/next');
  b.tick();
  assert.deepEqual(b.sentEvents().map((e) => e.url), ['https://shop.example/p?utm_source=news', 'https://shop.example/next']);
});

test("identify passes the backend's signature when given, queued or not", async () => {
  const sig = '46b8effbef5ea430470a7a148f32eaf4d63c2edc12ea36dc0d108f591fb119c5';
  const b = browser();
  b.run(STUB);
  b.run(`svc('identify', 'user-42', '${sig}'); svc('init', 'TRK');`);
  b.load();
  b.svc('identify', 7, { toString: () => 'abc' });
  b.svc('identify', 'user-9');
  b.svc('identify', 'user-8', '');
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 1);
  const raw = b.rec.fetches[0].init.body;
  assert.deepEqual(strip(b.sentEvents()).slice(1), [
    { type: 'identify', userId: 'user-42', signature: sig },
    { type: 'identify', userId: '7', signature: 'abc' },
    { type: 'identify', userId: 'user-9' },
    { type: 'identify', userId: 'user-8' },
  ]);
  assert.equal(raw.match(/"signature"/g).length, 2, 'no signature key without a signature');
});
