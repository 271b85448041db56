// Draws media/icon.png (128x128 RGBA): a word on a dark tile with the cursor
// in the middle of it and the completion as ghost text. Plain Node, no image
// library: pixels -> PNG (zlib + CRC32). Run: node scripts/make-icon.js
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const zlib = require('node:zlib');

const SIZE = 128;
const pixels = Buffer.alloc(SIZE * SIZE * 4);

function blend(x, y, [r, g, b], alpha = 1) {
  if (x < 0 || y < 0 || x >= SIZE || y >= SIZE) return;
  const i = (y * SIZE + x) * 4;
  const a0 = pixels[i + 3] / 255;
  const a = alpha + a0 * (1 - alpha);
  const mix = (c, c0) => (a === 0 ? 0 : Math.round((c * alpha + c0 * a0 * (1 - alpha)) / a));
  pixels[i] = mix(r, pixels[i]);
  pixels[i + 1] = mix(g, pixels[i + 1]);
  pixels[i + 2] = mix(b, pixels[i + 2]);
  pixels[i + 3] = Math.round(a * 255);
}

/** Anti-aliased rounded rectangle (4x4 supersampling). */
function roundedRect(x0, y0, x1, y1, radius, color, alpha = 1) {
  for (let y = Math.floor(y0); y < Math.ceil(y1); y++) {
    for (let x = Math.floor(x0); x < Math.ceil(x1); x++) {
      let inside = 0;
      for (let sy = 0; sy < 4; sy++) {
        for (let sx = 0; sx < 4; sx++) {
          const px = x + (sx + 0.5) / 4;
          const py = y + (sy + 0.5) / 4;
          const cx = Math.min(Math.max(px, x0 + radius), x1 - radius);
          const cy = Math.min(Math.max(py, y0 + radius), y1 - radius);
          if (px >= x0 && px <= x1 && py >= y0 && py <= y1 && (px - cx) ** 2 + (py - cy) ** 2 <= radius ** 2) {
            inside++;
          }
        }
      }
      if (inside > 0) blend(x, y, color, (alpha * inside) / 16);
    }
  }
}

const tile = [24, 32, 48];
const text = [230, 236, 245];
const ghost = [120, 140, 170];
const cursor = [80, 200, 255];

roundedRect(4, 4, 124, 124, 24, tile);
// Line above and below: context.
roundedRect(22, 30, 78, 40, 5, text, 0.35);
roundedRect(22, 88, 92, 98, 5, text, 0.35);
// The word being typed, then the ghost-text completion after the cursor.
roundedRect(22, 56, 60, 72, 8, text);
roundedRect(70, 56, 106, 72, 8, ghost, 0.8);
// The cursor, mid-word.
roundedRect(62, 46, 68, 82, 3, cursor);

function crc32(buffer) {
  let crc = 0xffffffff;
  for (const byte of buffer) {
    crc ^= byte;
    for (let k = 0; k < 8; k++) crc = crc & 1 ? (crc >>> 1) ^ 0xedb88320 : crc >>> 1;
  }
  return (crc ^ 0xffffffff) >>> 0;
}

function chunk(type, data) {
  const length = Buffer.alloc(4);
  length.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([length, body, crc]);
}

const header = Buffer.alloc(13);
header.writeUInt32BE(SIZE, 0);
header.writeUInt32BE(SIZE, 4);
header[8] = 8; // bit depth
header[9] = 6; // RGBA
const rows = [];
for (let y = 0; y < SIZE; y++) {
  rows.push(Buffer.from([0]), pixels.subarray(y * SIZE * 4, (y + 1) * SIZE * 4));
}
const png = Buffer.concat([
  Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
  chunk('IHDR', header),
  chunk('IDAT', zlib.deflateSync(Buffer.concat(rows), { level: 9 })),
  chunk('IEND', Buffer.alloc(0)),
]);
const out = path.join(__dirname, '..', 'media', 'icon.png');
fs.mkdirSync(path.dirname(out), { recursive: true });
fs.writeFileSync(out, png);
console.log(`wrote ${out} (${png.length} bytes)`);
