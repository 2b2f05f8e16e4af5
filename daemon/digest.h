/* digest.h — a weight tensor's fingerprint, so that a client can tell
 * whether the daemon serves the weights it loaded itself.
 *
 * The digest of a byte string is the CRC-32 (IEEE 802.3: zlib's crc32) of
 * the CRC-32s of its consecutive 1 MiB pieces (the last may be shorter),
 * each written as 4 little-endian bytes; 0 for an empty string. The pieces
 * make it parallel here and cheap in Python (zlib.crc32 per piece;
 * client/python/projd.py weight_digest), and it is computed over a
 * tensor's bytes exactly as the safetensors file stores them.
 */
#ifndef PJ_DIGEST_H
#define PJ_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define PJ_DIGEST_PIECE (1u << 20)

/* CRC-32 of p[0 .. n) continuing from crc (0 to start). */
uint32_t pj_crc32(uint32_t crc, const void *p, size_t n);

/* The digest of p[0 .. n), its pieces hashed on up to `threads` threads
 * (kernels/parfor.h; the value does not depend on the thread count).
 * Returns -ENOMEM (and leaves *out alone) when its scratch cannot be
 * allocated, else 0. */
int pj_digest(const void *p, size_t n, unsigned threads, uint32_t *out);

#endif
