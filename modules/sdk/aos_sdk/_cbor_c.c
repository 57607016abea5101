/* The guest's canonical CBOR, compiled: `aos_sdk._cbor_c`, a CPython extension module built
 * for wasm32-wasi as a shared library and linked into every Python component
 * (`aos.kernel.wasm.build`, spec/08 "Component ABI"). `aos_sdk.cbor` is the reference: this
 * module either gives exactly what the pure-Python codec gives, or declines (the `decline`
 * object for decode, None for encode), and the Python codec then runs and gives its result or
 * its error. So it must never accept what the Python codec refuses; refusing more than it is
 * only slower. The errors themselves are always raised by the Python codec.
 *
 * It is compiled without CPython's headers (there are none for the component's CPython
 * 3.14 / wasm32-wasi here): the few declarations below are those of the stable ABI it calls,
 * all functions or exported objects, never a macro over a private layout. Nothing here reads
 * a clock, randomness or the environment; no Python code runs while it works (only exact
 * built-in types are touched), so a value cannot change under it.
 */

typedef __PTRDIFF_TYPE__ Py_ssize_t;
typedef __SIZE_TYPE__ size_t;
typedef unsigned char u8;
typedef unsigned long long u64;

typedef struct _object {
    Py_ssize_t ob_refcnt; /* on 64-bit hosts a union of the same size; never read here */
    struct _object *ob_type;
} PyObject;

typedef PyObject *(*PyCFunction)(PyObject *, PyObject *);
typedef struct {
    const char *ml_name;
    PyCFunction ml_meth;
    int ml_flags;
    const char *ml_doc;
} PyMethodDef;
typedef struct {
    PyObject ob_base;
    PyObject *(*m_init)(void);
    Py_ssize_t m_index;
    PyObject *m_copy;
} PyModuleDef_Base;
typedef struct {
    PyModuleDef_Base m_base;
    const char *m_name;
    const char *m_doc;
    Py_ssize_t m_size;
    PyMethodDef *m_methods;
    void *m_slots, *m_traverse, *m_clear, *m_free;
} PyModuleDef;

#define METH_FASTCALL 0x0080
/* Deeper limits are left to the Python codec: this code recurses once per level on the
 * component's stack, where an overflow would trap the step instead of raising. */
#define DEPTH_MAX_COMPILED 256
#define PYTHON_API_VERSION 1013

extern PyObject PyLong_Type, PyUnicode_Type, PyDict_Type, PyList_Type, PyTuple_Type,
    PyFloat_Type, PyBytes_Type, PyBool_Type, _Py_NoneStruct, _Py_TrueStruct, _Py_FalseStruct;
extern void Py_IncRef(PyObject *);
extern void Py_DecRef(PyObject *);
extern PyObject *PyModule_Create2(PyModuleDef *, int);
extern void PyErr_Clear(void);
extern PyObject *PyErr_Occurred(void);
extern PyObject *PyLong_FromLongLong(long long);
extern PyObject *PyLong_FromUnsignedLongLong(u64);
extern long long PyLong_AsLongLongAndOverflow(PyObject *, int *);
extern u64 PyLong_AsUnsignedLongLong(PyObject *);
extern PyObject *PyNumber_Invert(PyObject *);
extern PyObject *PyFloat_FromDouble(double);
extern double PyFloat_AsDouble(PyObject *);
extern PyObject *PyUnicode_DecodeUTF8(const char *, Py_ssize_t, const char *);
extern const char *PyUnicode_AsUTF8AndSize(PyObject *, Py_ssize_t *);
extern PyObject *PyBytes_FromStringAndSize(const char *, Py_ssize_t);
extern char *PyBytes_AsString(PyObject *);
extern Py_ssize_t PyBytes_Size(PyObject *);
extern PyObject *PyDict_New(void);
extern int PyDict_SetItem(PyObject *, PyObject *, PyObject *);
extern Py_ssize_t PyDict_Size(PyObject *);
extern int PyDict_Next(PyObject *, Py_ssize_t *, PyObject **, PyObject **);
extern PyObject *PyList_New(Py_ssize_t);
extern int PyList_SetItem(PyObject *, Py_ssize_t, PyObject *);
extern Py_ssize_t PyList_Size(PyObject *);
extern PyObject *PyList_GetItem(PyObject *, Py_ssize_t);
extern Py_ssize_t PyTuple_Size(PyObject *);
extern PyObject *PyTuple_GetItem(PyObject *, Py_ssize_t);
extern long long PyLong_AsLongLong(PyObject *);
extern int PyObject_IsTrue(PyObject *);
extern void *PyMem_Malloc(size_t);
extern void *PyMem_Realloc(void *, size_t);
extern void PyMem_Free(void *);

#define TYPE(o) ((o)->ob_type)
#define NONE (&_Py_NoneStruct)

static PyObject *new_ref(PyObject *o) {
    Py_IncRef(o);
    return o;
}

static void copy_bytes(u8 *to, const u8 *from, size_t n) {
    for (size_t i = 0; i < n; i++) to[i] = from[i];
}

static int compare_bytes(const u8 *a, const u8 *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
}

static u64 double_bits(double v) {
    union { double d; u64 u; } x;
    x.d = v;
    return x.u;
}

static double bits_double(u64 u) {
    union { double d; u64 u; } x;
    x.u = u;
    return x.d;
}

/* ------------------------------------------------------------------------------------------
 * Floats: the narrowest of half, single and double that keeps the value; one NaN. */

#define FLOAT_BYTES_MAX 9

/* The half-precision bits of a finite, non-zero |value| (sign apart), or -1 when the value
 * is not exactly a half (too large, too small, or more significant bits than a half has). */
static int half_bits(u64 magnitude) {
    int biased = (int)(magnitude >> 52);
    u64 mantissa = magnitude & ((1ULL << 52) - 1);
    if (biased == 0) return -1; /* a double subnormal is far below a half's range */
    int exponent = biased - 1023;
    if (exponent > 15) return -1;
    if (exponent >= -14) {
        if (mantissa & ((1ULL << 42) - 1)) return -1;
        return ((exponent + 15) << 10) | (int)(mantissa >> 42);
    }
    if (exponent < -24) return -1;
    u64 full = (1ULL << 52) | mantissa;
    int shift = 28 - exponent; /* value = k * 2**-24, k = full >> shift */
    if (full & ((1ULL << shift) - 1)) return -1;
    return (int)(full >> shift);
}

static int float_bytes(double value, u8 *out) {
    u64 bits = double_bits(value);
    u64 sign = bits >> 63, magnitude = bits & ~(1ULL << 63);
    if (magnitude > 0x7FF0000000000000ULL) { /* NaN */
        out[0] = 0xF9, out[1] = 0x7E, out[2] = 0x00;
        return 3;
    }
    if (magnitude == 0x7FF0000000000000ULL) { /* infinity */
        out[0] = 0xF9, out[1] = sign ? 0xFC : 0x7C, out[2] = 0x00;
        return 3;
    }
    int half = magnitude == 0 ? 0 : half_bits(magnitude);
    if (half >= 0) {
        half |= (int)sign << 15;
        out[0] = 0xF9, out[1] = (u8)(half >> 8), out[2] = (u8)half;
        return 3;
    }
    double absolute = bits_double(magnitude);
    if (absolute <= 3.4028234663852886e38) {
        float narrow = (float)value;
        if ((double)narrow == value) {
            union { float f; unsigned int u; } x;
            x.f = narrow;
            out[0] = 0xFA;
            for (int i = 0; i < 4; i++) out[1 + i] = (u8)(x.u >> (24 - 8 * i));
            return 5;
        }
    }
    out[0] = 0xFB;
    for (int i = 0; i < 8; i++) out[1 + i] = (u8)(bits >> (56 - 8 * i));
    return 9;
}

static double half_value(unsigned int half) {
    unsigned int exponent = (half >> 10) & 0x1F, mantissa = half & 0x3FF;
    double magnitude;
    if (exponent == 0) {
        magnitude = (double)mantissa / 16777216.0; /* mantissa * 2**-24, exact */
    } else if (exponent == 31) {
        magnitude = bits_double(mantissa ? 0x7FF8000000000000ULL : 0x7FF0000000000000ULL);
    } else {
        /* (1024 + mantissa) * 2**(exponent - 25): a power of two built from its bits */
        magnitude = (double)(1024 + mantissa) * bits_double((u64)(exponent - 25 + 1023) << 52);
    }
    return (half & 0x8000) ? -magnitude : magnitude;
}

/* ------------------------------------------------------------------------------------------
 * Decoding: NULL (no exception left set) means "decline". */

typedef struct {
    const u8 *data;
    size_t size;
    size_t offset;
    int check; /* check canonical form (untrusted bytes) */
} Reader;

/* The smallest argument each head width may carry in canonical form (info 24-27). */
static const u64 SHORTEST_MIN[4] = {24, 0x100, 0x10000, 0x100000000ULL};

static PyObject *read_item(Reader *r, int depth_left);

static PyObject *read_map(Reader *r, u64 count, int depth_left) {
    if (count > (r->size - r->offset) / 2) return 0; /* each entry takes two bytes at least */
    PyObject *result = PyDict_New();
    if (result == 0) return 0;
    const u8 *previous = 0;
    size_t previous_size = 0;
    for (u64 i = 0; i < count; i++) {
        size_t key_start = r->offset;
        PyObject *key = read_item(r, depth_left - 1);
        if (key == 0) goto fail;
        if (TYPE(key) != &PyUnicode_Type && TYPE(key) != &PyLong_Type) {
            Py_DecRef(key);
            goto fail;
        }
        const u8 *key_bytes = r->data + key_start;
        size_t key_size = r->offset - key_start;
        if (r->check && previous != 0) {
            /* Keys ascend by encoded length, then bytewise; an equal key is a duplicate. */
            int order = key_size != previous_size
                            ? (key_size < previous_size ? -1 : 1)
                            : compare_bytes(key_bytes, previous, key_size);
            if (order <= 0) {
                Py_DecRef(key);
                goto fail;
            }
        }
        previous = key_bytes, previous_size = key_size;
        PyObject *value = read_item(r, depth_left - 1);
        if (value == 0) {
            Py_DecRef(key);
            goto fail;
        }
        Py_ssize_t before = PyDict_Size(result);
        int failed = PyDict_SetItem(result, key, value);
        Py_DecRef(key);
        Py_DecRef(value);
        if (failed || PyDict_Size(result) == before) goto fail; /* a duplicate key */
    }
    return result;
fail:
    Py_DecRef(result);
    return 0;
}

static PyObject *read_array(Reader *r, u64 count, int depth_left) {
    if (count > r->size - r->offset) return 0; /* each item takes a byte at least */
    PyObject *result = PyList_New((Py_ssize_t)count);
    if (result == 0) return 0;
    for (u64 i = 0; i < count; i++) {
        PyObject *item = read_item(r, depth_left - 1);
        if (item == 0) {
            Py_DecRef(result);
            return 0;
        }
        PyList_SetItem(result, (Py_ssize_t)i, item); /* steals the reference */
    }
    return result;
}

static PyObject *read_float(Reader *r, int info, u64 arg, size_t start) {
    double value;
    if (info == 25) {
        value = half_value((unsigned int)arg);
    } else if (info == 26) {
        union { float f; unsigned int u; } x;
        x.u = (unsigned int)arg;
        value = (double)x.f;
    } else {
        value = bits_double(arg);
    }
    if (r->check) {
        u8 canonical[FLOAT_BYTES_MAX];
        int size = float_bytes(value, canonical);
        if ((size_t)size != r->offset - start ||
            compare_bytes(canonical, r->data + start, (size_t)size) != 0)
            return 0;
    }
    return PyFloat_FromDouble(value);
}

static PyObject *read_negative(u64 arg) {
    if (arg <= 0x7FFFFFFFFFFFFFFFULL) return PyLong_FromLongLong(-1 - (long long)arg);
    PyObject *positive = PyLong_FromUnsignedLongLong(arg);
    if (positive == 0) return 0;
    PyObject *negative = PyNumber_Invert(positive); /* ~arg == -1 - arg */
    Py_DecRef(positive);
    return negative;
}

static PyObject *read_item(Reader *r, int depth_left) {
    if (r->offset >= r->size) return 0;
    size_t start = r->offset;
    u8 initial = r->data[r->offset++];
    int major = initial >> 5, info = initial & 0x1F;
    u64 arg;
    if (info < 24) {
        arg = (u64)info;
    } else if (info <= 27) {
        size_t width = (size_t)1 << (info - 24);
        if (width > r->size - r->offset) return 0;
        arg = 0;
        for (size_t i = 0; i < width; i++) arg = (arg << 8) | r->data[r->offset + i];
        r->offset += width;
        if (r->check && major != 7 && arg < SHORTEST_MIN[info - 24]) return 0;
    } else {
        return 0; /* indefinite lengths, reserved information */
    }
    switch (major) {
        case 0:
            return PyLong_FromUnsignedLongLong(arg);
        case 1:
            return read_negative(arg);
        case 2:
        case 3: {
            if (arg > r->size - r->offset) return 0;
            const char *at = (const char *)(r->data + r->offset);
            r->offset += (size_t)arg;
            if (major == 2) return PyBytes_FromStringAndSize(at, (Py_ssize_t)arg);
            PyObject *text = PyUnicode_DecodeUTF8(at, (Py_ssize_t)arg, "strict");
            if (text == 0) PyErr_Clear();
            return text;
        }
        case 4:
            return depth_left <= 0 ? 0 : read_array(r, arg, depth_left);
        case 5:
            return depth_left <= 0 ? 0 : read_map(r, arg, depth_left);
        case 7:
            if (info == 20) return new_ref(&_Py_FalseStruct);
            if (info == 21) return new_ref(&_Py_TrueStruct);
            if (info == 22) return new_ref(NONE);
            if (info >= 25 && info <= 27) return read_float(r, info, arg, start);
            return 0;
        default:
            return 0; /* tags inside a value */
    }
}

/* decode(data: bytes, depth_max: int, trusted: bool, decline: object) */
static PyObject *cbor_decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 4) return 0;
    PyObject *data = args[0], *decline = args[3];
    if (TYPE(data) != &PyBytes_Type || TYPE(args[1]) != &PyLong_Type) return new_ref(decline);
    long long depth_max = PyLong_AsLongLong(args[1]);
    if (depth_max < 0 || depth_max > DEPTH_MAX_COMPILED) {
        PyErr_Clear();
        return new_ref(decline);
    }
    Reader r;
    r.data = (const u8 *)PyBytes_AsString(data);
    r.size = (size_t)PyBytes_Size(data);
    r.check = !PyObject_IsTrue(args[2]);
    if (r.size < 3 || r.data[0] != 0xD9 || r.data[1] != 0xD9 || r.data[2] != 0xF7)
        return new_ref(decline);
    r.offset = 3;
    PyObject *value = read_item(&r, (int)depth_max);
    if (value != 0 && r.offset == r.size) return value;
    if (value != 0) Py_DecRef(value);
    PyErr_Clear();
    return new_ref(decline);
}

/* ------------------------------------------------------------------------------------------
 * Encoding: -1 (no exception left set) means "decline". */

typedef struct {
    u8 *data;
    size_t size;
    size_t capacity;
} Writer;

static int reserve(Writer *w, size_t more) {
    if (more <= w->capacity - w->size) return 0;
    size_t capacity = w->capacity ? w->capacity : 256;
    while (capacity - w->size < more) {
        if (capacity > ((size_t)-1) / 2) return -1;
        capacity *= 2;
    }
    u8 *grown = PyMem_Realloc(w->data, capacity);
    if (grown == 0) return -1;
    w->data = grown, w->capacity = capacity;
    return 0;
}

static int put(Writer *w, const u8 *bytes, size_t n) {
    if (reserve(w, n)) return -1;
    copy_bytes(w->data + w->size, bytes, n);
    w->size += n;
    return 0;
}

static int put_head(Writer *w, int major, u64 arg) {
    u8 head[9];
    int size;
    u8 tag = (u8)(major << 5);
    if (arg < 24) {
        head[0] = tag | (u8)arg, size = 1;
    } else {
        int width = arg < 0x100 ? 1 : arg < 0x10000 ? 2 : arg < 0x100000000ULL ? 4 : 8;
        head[0] = tag | (u8)(width == 1 ? 24 : width == 2 ? 25 : width == 4 ? 26 : 27);
        for (int i = 0; i < width; i++) head[1 + i] = (u8)(arg >> (8 * (width - 1 - i)));
        size = 1 + width;
    }
    return put(w, head, (size_t)size);
}

static int write_item(Writer *w, PyObject *value, int depth_left);

static int write_int(Writer *w, PyObject *value) {
    int overflow = 0;
    long long small = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow == 0)
        return small >= 0 ? put_head(w, 0, (u64)small) : put_head(w, 1, (u64)(-1 - small));
    /* Beyond a long long: 2**63 .. 2**64-1, or -2**64 .. -2**63-1 through ~value. */
    PyObject *magnitude = overflow > 0 ? new_ref(value) : PyNumber_Invert(value);
    if (magnitude == 0) return -1;
    u64 arg = PyLong_AsUnsignedLongLong(magnitude);
    int out_of_range = PyErr_Occurred() != 0;
    Py_DecRef(magnitude);
    if (out_of_range) return -1;
    return put_head(w, overflow > 0 ? 0 : 1, arg);
}

typedef struct {
    PyObject *key, *value;
    size_t key_at, key_size; /* the key's encoding in the map's scratch writer */
} Entry;

static int key_before(const Writer *keys, const Entry *a, const Entry *b) {
    if (a->key_size != b->key_size) return a->key_size < b->key_size;
    return compare_bytes(keys->data + a->key_at, keys->data + b->key_at, a->key_size) < 0;
}

/* A stable merge sort of `entries` by their keys' encodings (length, then bytewise). */
static void sort_entries(const Writer *keys, Entry *entries, Entry *spare, size_t n) {
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t low = 0; low < n; low += 2 * width) {
            size_t middle = low + width < n ? low + width : n;
            size_t high = low + 2 * width < n ? low + 2 * width : n;
            size_t i = low, j = middle, k = low;
            while (i < middle && j < high)
                spare[k++] = key_before(keys, &entries[j], &entries[i]) ? entries[j++]
                                                                         : entries[i++];
            while (i < middle) spare[k++] = entries[i++];
            while (j < high) spare[k++] = entries[j++];
        }
        for (size_t m = 0; m < n; m++) entries[m] = spare[m];
    }
}

static int write_map(Writer *w, PyObject *value, int depth_left) {
    Py_ssize_t count = PyDict_Size(value);
    if (count == 0) return put_head(w, 5, 0);
    Entry *entries = PyMem_Malloc(sizeof(Entry) * (size_t)count * 2);
    if (entries == 0) return -1;
    Writer keys = {0, 0, 0};
    int failed = 0;
    Py_ssize_t position = 0, n = 0;
    PyObject *key, *item;
    while (!failed && n < count && PyDict_Next(value, &position, &key, &item)) {
        if (TYPE(key) != &PyUnicode_Type && TYPE(key) != &PyLong_Type) {
            failed = 1;
            break;
        }
        entries[n].key = key, entries[n].value = item, entries[n].key_at = keys.size;
        failed = write_item(&keys, key, 1);
        entries[n].key_size = keys.size - entries[n].key_at;
        n++;
    }
    if (!failed && n == count) {
        sort_entries(&keys, entries, entries + count, (size_t)count);
        failed = put_head(w, 5, (u64)count);
        for (Py_ssize_t i = 0; !failed && i < count; i++) {
            failed = put(w, keys.data + entries[i].key_at, entries[i].key_size) ||
                     write_item(w, entries[i].value, depth_left - 1);
        }
    } else {
        failed = 1;
    }
    PyMem_Free(keys.data);
    PyMem_Free(entries);
    return failed ? -1 : 0;
}

static int write_item(Writer *w, PyObject *value, int depth_left) {
    PyObject *kind = TYPE(value);
    if (kind == &PyUnicode_Type) {
        Py_ssize_t size;
        const char *text = PyUnicode_AsUTF8AndSize(value, &size); /* fails on surrogates */
        if (text == 0) return -1;
        return put_head(w, 3, (u64)size) || put(w, (const u8 *)text, (size_t)size) ? -1 : 0;
    }
    if (kind == &PyDict_Type) return depth_left <= 0 ? -1 : write_map(w, value, depth_left);
    if (kind == &PyLong_Type) return write_int(w, value);
    if (value == NONE) return put(w, (const u8 *)"\xF6", 1);
    if (kind == &PyBool_Type)
        return put(w, (const u8 *)(value == &_Py_TrueStruct ? "\xF5" : "\xF4"), 1);
    if (kind == &PyList_Type || kind == &PyTuple_Type) {
        if (depth_left <= 0) return -1;
        int list = kind == &PyList_Type;
        Py_ssize_t count = list ? PyList_Size(value) : PyTuple_Size(value);
        if (put_head(w, 4, (u64)count)) return -1;
        for (Py_ssize_t i = 0; i < count; i++) {
            PyObject *item = list ? PyList_GetItem(value, i) : PyTuple_GetItem(value, i);
            if (item == 0 || write_item(w, item, depth_left - 1)) return -1;
        }
        return 0;
    }
    if (kind == &PyFloat_Type) {
        u8 bytes[FLOAT_BYTES_MAX];
        return put(w, bytes, (size_t)float_bytes(PyFloat_AsDouble(value), bytes));
    }
    if (kind == &PyBytes_Type) {
        Py_ssize_t size = PyBytes_Size(value);
        return put_head(w, 2, (u64)size) ||
                       put(w, (const u8 *)PyBytes_AsString(value), (size_t)size)
                   ? -1
                   : 0;
    }
    return -1; /* a type the codec does not encode: the Python codec says which */
}

/* encode(value, depth_max: int) -> bytes (self-described) | None */
static PyObject *cbor_encode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || TYPE(args[1]) != &PyLong_Type) return new_ref(NONE);
    long long depth_max = PyLong_AsLongLong(args[1]);
    if (depth_max < 0 || depth_max > DEPTH_MAX_COMPILED) {
        PyErr_Clear();
        return new_ref(NONE);
    }
    Writer w = {0, 0, 0};
    PyObject *result = 0;
    if (put(&w, (const u8 *)"\xD9\xD9\xF7", 3) == 0 && write_item(&w, args[0], (int)depth_max) == 0)
        result = PyBytes_FromStringAndSize((const char *)w.data, (Py_ssize_t)w.size);
    PyMem_Free(w.data);
    if (result != 0) return result;
    PyErr_Clear();
    return new_ref(NONE);
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))cbor_decode, METH_FASTCALL,
     "decode(data, depth_max, trusted, decline): the value, or `decline`"},
    {"encode", (PyCFunction)(void (*)(void))cbor_encode, METH_FASTCALL,
     "encode(value, depth_max): the self-described canonical bytes, or None"},
    {0, 0, 0, 0},
};

static PyModuleDef module = {
    {{1, 0}, 0, 0, 0}, "aos_sdk._cbor_c", "The guest's canonical CBOR, compiled.", -1, methods,
    0, 0, 0, 0,
};

__attribute__((visibility("default"))) PyObject *PyInit__cbor_c(void) {
    return PyModule_Create2(&module, PYTHON_API_VERSION);
}
