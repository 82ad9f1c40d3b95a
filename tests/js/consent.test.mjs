// Consent in assets/pixel.js (docs/decisions.md §13): `svc('consent', {analytics, ads})`,
// `svc('init', id, {consent: 'required'})`, the visitor cookie and `identify` only with analytics
// consent, the consent state and the ad platforms' cookies in each batch. Run with `node --test tests/js/`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { browser, settle, ok, STUB } from './harness.mjs';

const AD_COOKIES = '_fbp=fb.1.1700000000000.123456789; _fbc=fb.1.1700000000001.IwAR-x_1; '
  + '_ga=GA1.1.111.222; _ga_ABC123=GS2.1.s1700000000$o1$g0; other=1';
const vidWrites = (b) => b.rec.cookieWrites.filter((c) => c.startsWith('_svc_vid='));

test('consent required: no cookie and no identify before consent; both after analytics consent', async () => {
  const b = browser();
  b.run(STUB);
  b.run(`svc('init', 'TRK', {consent: 'required'}); svc('identify', 'user-42')`);
  b.load();
  assert.equal(vidWrites(b).length, 0, 'nothing written on the device before consent');
  assert.doesNotMatch(b.cookie, /_svc_vid/);
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 1);
  const first = b.rec.fetches[0].json;
  assert.deepEqual(first.consent, {}, 'no answer yet');
  assert.deepEqual(first.events.map((e) => e.type), ['pageview'], 'identify waits for consent');
  b.svc('consent', { analytics: true });
  assert.match(b.cookie, /_svc_vid=/, 'the cookie once analytics consent is given');
  assert.match(vidWrites(b).at(-1), /max-age=34214400/);
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 2);
  const second = b.rec.fetches[1].json;
  assert.deepEqual(second.consent, { analytics: true }, 'the state known so far, ads not asked');
  assert.deepEqual(second.events.map((e) => e.type), ['identify']);
  assert.equal(second.visitorId, first.visitorId, 'one visitor id for the page');
});

test('an explicit analytics denial deletes the cookie and drops identify for good', async () => {
  const b = browser({ cookie: '_svc_vid=v-old; a=1' });
  b.run(STUB);
  b.run(`svc('init', 'TRK'); svc('identify', 'u1'); svc('consent', {analytics: false, ads: false})`);
  b.load();
  assert.doesNotMatch(b.cookie, /_svc_vid/, 'deleted');
  assert.match(b.rec.cookieWrites.at(-1), /^_svc_vid=v-old; max-age=0; /);
  b.tick();
  await settle();
  const sent = b.rec.fetches[0].json;
  assert.deepEqual(sent.consent, { analytics: false, ads: false });
  assert.deepEqual(sent.events.map((e) => e.type), ['pageview'], 'identify is not sent');
  b.svc('track', 'x');
  b.tick();
  await settle();
  assert.deepEqual(b.sentEvents().map((e) => e.type), ['pageview', 'event'], 'nor kept for later');
});

test('either key alone: ads consent given later keeps the analytics answer', async () => {
  const b = browser();
  b.run(STUB);
  b.run(`svc('init', 'TRK', {consent: 'required'}); svc('consent', {analytics: true})`);
  b.load();
  b.svc('consent', { ads: false });
  b.tick();
  await settle();
  assert.deepEqual(b.rec.fetches[0].json.consent, { analytics: true, ads: false });
  assert.match(b.cookie, /_svc_vid=/);
});

test("the server's answer that consent is required deletes a cookie written without the option", async () => {
  const b = browser({ respond: (call) => ok({ visitorId: null, sessionId: 's1', accepted: call.json.events.length, consent: 'required' }) });
  b.run(STUB);
  b.run(`svc('init', 'TRK'); svc('identify', 'u1')`);
  b.load();
  assert.match(b.cookie, /_svc_vid=/, 'written: the pixel did not know yet');
  b.tick();
  await settle();
  assert.doesNotMatch(b.cookie, /_svc_vid/, 'deleted once the server said so');
  assert.equal(b.svc('sessionId'), 's1');
  b.svc('identify', 'u2');
  b.tick();
  await settle();
  assert.equal(b.rec.fetches.length, 1, 'identify now waits for consent');
  b.svc('consent', { analytics: true });
  b.tick();
  await settle();
  const identified = b.sentEvents().filter((e) => e.type == 'identify').map((e) => e.userId);
  assert.deepEqual(identified, ['u1', 'u2'], 'u1 left before the answer, u2 after consent');
  assert.deepEqual(b.rec.fetches.at(-1).json.consent, { analytics: true });
  assert.match(b.cookie, /_svc_vid=/);
});

test('a consenting answer never makes the pixel write a cookie without analytics consent', async () => {
  const b = browser({ respond: () => ok({ visitorId: 'server-vid', sessionId: 's1', accepted: 1 }) });
  b.run(STUB);
  b.run(`svc('init', 'TRK', {consent: 'required'})`);
  b.load();
  b.tick();
  await settle();
  assert.equal(vidWrites(b).length, 0);
});

test("svc('visitorId') follows analytics consent, as the cookie does", async () => {
  const b = browser();
  b.run(STUB);
  b.run(`svc('init', 'TRK', {consent: 'required'})`);
  b.load();
  assert.equal(b.svc('visitorId'), null, 'not before consent');
  b.tick();
  await settle();
  const sent = b.rec.fetches[0].json.visitorId;
  b.svc('consent', { ads: true });
  assert.equal(b.svc('visitorId'), null, 'ads consent alone is not enough');
  b.svc('consent', { analytics: true });
  assert.equal(b.svc('visitorId'), sent, 'the id the pixel sends');
  assert.match(b.cookie, new RegExp(`_svc_vid=${sent}`));
  b.svc('consent', { analytics: false });
  assert.equal(b.svc('visitorId'), null, 'withdrawn');

  // Not required by the site, but the server answers that it is.
  const s = browser({ respond: (call) => ok({ visitorId: null, sessionId: 's1', accepted: call.json.events.length, consent: 'required' }) });
  s.run(STUB);
  s.run(`svc('init', 'TRK')`);
  s.load();
  assert.match(s.svc('visitorId'), /./, 'granted while nothing says otherwise');
  s.tick();
  await settle();
  assert.equal(s.svc('visitorId'), null);
});

test("the ad platforms' cookies ride along as consent allows", async () => {
  const sent = async (setup) => {
    const b = browser({ cookie: AD_COOKIES });
    b.run(STUB);
    b.run(setup);
    b.load();
    b.tick();
    await settle();
    return b.rec.fetches[0].json.cookies;
  };
  const all = {
    _fbp: 'fb.1.1700000000000.123456789', _fbc: 'fb.1.1700000000001.IwAR-x_1',
    _ga: 'GA1.1.111.222', _ga_ABC123: 'GS2.1.s1700000000$o1$g0',
  };
  assert.deepEqual(await sent(`svc('init', 'TRK')`), all, 'no consent asked: granted');
  assert.deepEqual(await sent(`svc('init', 'TRK', {consent: 'required'})`), {}, 'required, not given');
  assert.deepEqual(
    await sent(`svc('init', 'TRK', {consent: 'required'}); svc('consent', {analytics: true})`),
    { _ga: all._ga, _ga_ABC123: all._ga_ABC123 }, 'analytics only: the _ga cookies');
  assert.deepEqual(
    await sent(`svc('init', 'TRK', {consent: 'required'}); svc('consent', {ads: true})`),
    { _fbp: all._fbp, _fbc: all._fbc }, 'ads only: Meta cookies');
  assert.deepEqual(await sent(`svc('init', 'TRK'); svc('consent', {ads: false})`),
    { _ga: all._ga, _ga_ABC123: all._ga_ABC123 }, 'an explicit denial wins');
});

test('odd consent calls never throw', () => {
  const b = browser();
  b.load();
  for (const args of [['consent'], ['consent', null], ['consent', 'yes'], ['consent', 1], ['consent', { analytics: 'x' }],
    ['init', 'T', 'required'], ['init', 'T', null]]) {
    assert.doesNotThrow(() => b.svc(...args), JSON.stringify(args));
  }
});
