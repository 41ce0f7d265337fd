/* libFuzzer target for the wire decoder: any byte string is either one valid frame, which must re-encode and
 * decode again to the same message, or a protocol error. Never a crash, a leak or an out-of-bounds read. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sbw_msg msg;
  char err[256];
  if (sbw_decode_frame(data, size, &msg, err, sizeof(err)) != 0) return 0;
  /* Walk everything the decoder produced (ASan checks every pointer it hands out). */
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < msg.body.nitems; i++) {
    const sbw_item *it = &msg.body.items[i];
    for (uint32_t k = 0; k < it->len; k++) sink ^= it->p[k];
    if (it->nested)
      for (size_t j = 0; j < it->nested->nitems; j++)
        for (uint32_t k = 0; k < it->nested->items[j].len; k++) sink ^= it->nested->items[j].p[k];
  }
  (void)sink;
  /* The canonical encoding decodes to the same canonical encoding. */
  sbw_buf a = {0}, b = {0};
  if (sbw_encode_msg(&msg, &a) != 0) abort();
  sbw_msg again;
  if (sbw_decode_frame(a.p, a.len, &again, err, sizeof(err)) != 0) abort();
  if (sbw_encode_msg(&again, &b) != 0 || a.len != b.len || memcmp(a.p, b.p, a.len) != 0) abort();
  sbw_msg_free(&again);
  sbw_msg_free(&msg);
  sbw_buf_free(&a);
  sbw_buf_free(&b);
  return 0;
}
