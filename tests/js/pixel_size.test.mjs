// The pixel is served to every page view of every site, so it is kept under 5 KiB uncompressed
// (4 KiB until consent and the ad platforms' cookies came in; about 2.3 KiB gzipped).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { PIXEL_PATH } from './harness.mjs';

test('assets/pixel.js is under 5120 bytes', () => {
  const size = statSync(PIXEL_PATH).size;
  assert.ok(size > 0, 'the file exists and is not empty');
  assert.ok(size < 5120, `pixel.js is ${size} bytes, the limit is 5120`);
});
