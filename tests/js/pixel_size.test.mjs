// The pixel is served to every page view of every site: docs/decisions.md §4 caps it at 4 KB
// uncompressed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { PIXEL_PATH } from './harness.mjs';

test('assets/pixel.js is under 4096 bytes', () => {
  const size = statSync(PIXEL_PATH).size;
  assert.ok(size > 0, 'the file exists and is not empty');
  assert.ok(size < 4096, `pixel.js is ${size} bytes, the limit is 4096`);
});
