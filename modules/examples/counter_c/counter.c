/* The keyed counter for the core ABI, in freestanding C (no libc).
 *
 * Byte for byte the same step as the Python counter (modules/examples/counter_py):
 *   event demo/CounterEvent@1 = {"$tag": "Increment", "$value": {"id": text, "by": nat}}
 *                             | {"$tag": "Reset", "$value": {"id": text}}
 *   state demo/CounterState@1 = {"count": nat, "resets": nat}; a null state is all zeros.
 * Increment adds `by`; when that crosses a multiple of ten it emits one
 * demo/CounterThreshold@1 {"id", "count", "threshold"}. Reset zeroes count and bumps resets.
 * No effects; the state is always returned.
 *
 * Input and output are canonical CBOR envelopes (spec/08-wasm.md). The reader accepts
 * only what the host sends (definite lengths, shortest heads) and traps on anything else;
 * a trap is a step fault, so nothing half-done ever leaves the guest.
 *
 * Build: python -m ziglang cc --target=wasm32-freestanding -nostdlib -O2 -Wl,--no-entry
 *        -Wl,--export-memory -Wl,--export=alloc -Wl,--export=step counter.c -o counter.wasm
 */

typedef unsigned char u8;
typedef unsigned int u32;
typedef unsigned long long u64;

#define NULL_ITEM 0xf6
#define MAJOR_UINT 0
#define MAJOR_BYTES 2
#define MAJOR_TEXT 3
#define MAJOR_ARRAY 4
#define MAJOR_MAP 5
#define THRESHOLD_STEP 10
#define PAGE_BYTES 65536u

static const u8 SELF_DESCRIBE[3] = {0xd9, 0xd9, 0xf7};

static void fail(void) { __builtin_trap(); }

/* ---- arena: reset by alloc(), which the host calls exactly once per step ---------------- */

extern u8 __heap_base;
static u32 arena_top;

static u8 *arena_take(u32 size) {
  u32 start = (arena_top + 7u) & ~7u;
  u32 end = start + size;
  if (end < start) fail();
  u32 have = (u32)__builtin_wasm_memory_size(0) * PAGE_BYTES;
  if (end > have) {
    u32 pages = (end - have + PAGE_BYTES - 1) / PAGE_BYTES;
    if (__builtin_wasm_memory_grow(0, pages) == (unsigned long)-1) fail();
  }
  arena_top = end;
  return (u8 *)start;
}

__attribute__((export_name("alloc"))) u8 *alloc(u32 size) {
  arena_top = (u32)&__heap_base;
  return arena_take(size);
}

static void copy(u8 *to, const u8 *from, u32 n) {
  for (u32 i = 0; i < n; i++) to[i] = from[i];
}

static int equal(const u8 *a, u32 a_len, const char *b) {
  u32 i = 0;
  for (; b[i]; i++)
    if (i >= a_len || a[i] != (u8)b[i]) return 0;
  return i == a_len;
}

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct {
  const u8 *at;
  const u8 *end;
} reader;

typedef struct {
  const u8 *data;
  u32 len;
} slice;

static u8 read_byte(reader *r) {
  if (r->at >= r->end) fail();
  return *r->at++;
}

/* One item head of the expected major type; returns its argument. Non-shortest forms are
 * refused, as the host never sends them. */
static u64 read_head(reader *r, u32 major) {
  u8 first = read_byte(r);
  if ((u32)(first >> 5) != major) fail();
  u32 info = first & 31u;
  if (info < 24) return info;
  u32 size = info == 24 ? 1 : info == 25 ? 2 : info == 26 ? 4 : info == 27 ? 8 : 0;
  if (size == 0) fail();
  u64 value = 0;
  for (u32 i = 0; i < size; i++) value = (value << 8) | read_byte(r);
  u64 floor = size == 1 ? 24 : size == 2 ? 0x100 : size == 4 ? 0x10000 : 0x100000000ull;
  if (value < floor) fail();
  return value;
}

static slice read_string(reader *r, u32 major) {
  u64 len = read_head(r, major);
  if (len > (u64)(r->end - r->at)) fail();
  slice s = {r->at, (u32)len};
  r->at += len;
  return s;
}

static int peek_null(reader *r) {
  if (r->at < r->end && *r->at == NULL_ITEM) {
    r->at++;
    return 1;
  }
  return 0;
}

static reader embedded(slice s) {
  if (s.len < 3 || s.data[0] != SELF_DESCRIBE[0] || s.data[1] != SELF_DESCRIBE[1] ||
      s.data[2] != SELF_DESCRIBE[2])
    fail();
  reader r = {s.data + 3, s.data + s.len};
  return r;
}

static void read_end(reader *r) {
  if (r->at != r->end) fail();
}

/* ---- writer ------------------------------------------------------------------------------ */

typedef struct {
  u8 *at;
} writer;

static void write_head(writer *w, u32 major, u64 value) {
  u8 m = (u8)(major << 5);
  if (value < 24) {
    *w->at++ = m | (u8)value;
    return;
  }
  u32 size = value <= 0xff ? 1 : value <= 0xffff ? 2 : value <= 0xffffffffull ? 4 : 8;
  *w->at++ = m | (size == 1 ? 24 : size == 2 ? 25 : size == 4 ? 26 : 27);
  for (u32 i = size; i > 0; i--) *w->at++ = (u8)(value >> (8 * (i - 1)));
}

static void write_string(writer *w, u32 major, const u8 *data, u32 len) {
  write_head(w, major, len);
  copy(w->at, data, len);
  w->at += len;
}

static void write_text(writer *w, const char *text) {
  u32 len = 0;
  while (text[len]) len++;
  write_string(w, MAJOR_TEXT, (const u8 *)text, len);
}

static void write_self_describe(writer *w) {
  copy(w->at, SELF_DESCRIBE, 3);
  w->at += 3;
}

/* ---- the step ---------------------------------------------------------------------------- */

typedef struct {
  u64 count;
  u64 resets;
} counter_state;

typedef struct {
  int is_reset;
  slice id;
  u64 by;
} counter_event;

static counter_state read_state(slice bytes) {
  reader r = embedded(bytes);
  if (read_head(&r, MAJOR_MAP) != 2) fail();
  counter_state s;
  slice key = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "count")) fail();
  s.count = read_head(&r, MAJOR_UINT);
  key = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "resets")) fail();
  s.resets = read_head(&r, MAJOR_UINT);
  read_end(&r);
  return s;
}

static counter_event read_event(slice bytes) {
  reader r = embedded(bytes);
  counter_event e = {0, {0, 0}, 0};
  if (read_head(&r, MAJOR_MAP) != 2) fail();
  slice key = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "$tag")) fail();
  slice tag = read_string(&r, MAJOR_TEXT);
  key = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "$value")) fail();
  if (equal(tag.data, tag.len, "Increment")) {
    if (read_head(&r, MAJOR_MAP) != 2) fail();
    key = read_string(&r, MAJOR_TEXT);
    if (!equal(key.data, key.len, "by")) fail();
    e.by = read_head(&r, MAJOR_UINT);
  } else if (equal(tag.data, tag.len, "Reset")) {
    e.is_reset = 1;
    if (read_head(&r, MAJOR_MAP) != 1) fail();
  } else {
    fail();
  }
  key = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "id")) fail();
  e.id = read_string(&r, MAJOR_TEXT);
  read_end(&r);
  return e;
}

/* The input envelope: {"ctx"?, "event": {"key"?, "value", "schema"}, "state", "version"}
 * in canonical key order. Returns the event; *state_bytes.data is 0 for a null state. */
static counter_event read_input(const u8 *input, u32 len, slice *state_bytes) {
  reader r = {input, input + len};
  for (u32 i = 0; i < 3; i++)
    if (read_byte(&r) != SELF_DESCRIBE[i]) fail();
  u64 fields = read_head(&r, MAJOR_MAP);
  slice key = read_string(&r, MAJOR_TEXT);
  if (fields == 4) {
    if (!equal(key.data, key.len, "ctx")) fail();
    read_string(&r, MAJOR_BYTES);
    key = read_string(&r, MAJOR_TEXT);
  } else if (fields != 3) {
    fail();
  }
  if (!equal(key.data, key.len, "event")) fail();
  u64 event_fields = read_head(&r, MAJOR_MAP);
  key = read_string(&r, MAJOR_TEXT);
  if (event_fields == 3) {
    if (!equal(key.data, key.len, "key")) fail();
    read_string(&r, MAJOR_BYTES);
    key = read_string(&r, MAJOR_TEXT);
  } else if (event_fields != 2) {
    fail();
  }
  if (!equal(key.data, key.len, "value")) fail();
  slice value = read_string(&r, MAJOR_BYTES);
  key = read_string(&r, MAJOR_TEXT);
  slice schema = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "schema") ||
      !equal(schema.data, schema.len, "demo/CounterEvent@1"))
    fail();
  key = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "state")) fail();
  slice none = {0, 0};
  *state_bytes = peek_null(&r) ? none : read_string(&r, MAJOR_BYTES);
  key = read_string(&r, MAJOR_TEXT);
  if (!equal(key.data, key.len, "version") || read_head(&r, MAJOR_UINT) != 1) fail();
  read_end(&r);
  return read_event(value);
}

static u32 encode_state(u8 *out, counter_state s) {
  writer w = {out};
  write_self_describe(&w);
  write_head(&w, MAJOR_MAP, 2);
  write_text(&w, "count");
  write_head(&w, MAJOR_UINT, s.count);
  write_text(&w, "resets");
  write_head(&w, MAJOR_UINT, s.resets);
  return (u32)(w.at - out);
}

static u32 encode_threshold(u8 *out, slice id, u64 count) {
  writer w = {out};
  write_self_describe(&w);
  write_head(&w, MAJOR_MAP, 3);
  write_text(&w, "id");
  write_string(&w, MAJOR_TEXT, id.data, id.len);
  write_text(&w, "count");
  write_head(&w, MAJOR_UINT, count);
  write_text(&w, "threshold");
  write_head(&w, MAJOR_UINT, count / THRESHOLD_STEP * THRESHOLD_STEP);
  return (u32)(w.at - out);
}

/* {"state": bytes, "effects": [], "domain_events": [event?]}, canonical key order. */
static u32 encode_output(u8 *out, const u8 *state, u32 state_len, const u8 *event,
                         u32 event_len) {
  writer w = {out};
  write_self_describe(&w);
  write_head(&w, MAJOR_MAP, 3);
  write_text(&w, "state");
  write_string(&w, MAJOR_BYTES, state, state_len);
  write_text(&w, "effects");
  write_head(&w, MAJOR_ARRAY, 0);
  write_text(&w, "domain_events");
  write_head(&w, MAJOR_ARRAY, event ? 1 : 0);
  if (event) {
    write_head(&w, MAJOR_MAP, 2);
    write_text(&w, "value");
    write_string(&w, MAJOR_BYTES, event, event_len);
    write_text(&w, "schema");
    write_text(&w, "demo/CounterThreshold@1");
  }
  return (u32)(w.at - out);
}

__attribute__((export_name("step"))) u64 step(const u8 *input, u32 len) {
  slice state_bytes;
  counter_event e = read_input(input, len, &state_bytes);
  counter_state s = {0, 0};
  if (state_bytes.data) s = read_state(state_bytes);
  u8 *event = 0;
  u32 event_len = 0;
  if (e.is_reset) {
    s.count = 0;
    if (s.resets + 1 == 0) fail();
    s.resets += 1;
  } else {
    u64 count = s.count + e.by;
    if (count < s.count) fail(); /* past 2**64 - 1: not a nat CBOR can carry */
    if (s.count / THRESHOLD_STEP < count / THRESHOLD_STEP) {
      event = arena_take(e.id.len + 64); /* at most id + 59 bytes */
      event_len = encode_threshold(event, e.id, count);
    }
    s.count = count;
  }
  u8 *state = arena_take(48); /* at most 35 bytes */
  u32 state_len = encode_state(state, s);
  u8 *out = arena_take(state_len + event_len + 128); /* fixed part < 110 */
  u32 out_len = encode_output(out, state, state_len, event, event_len);
  return ((u64)(u32)out << 32) | out_len;
}
