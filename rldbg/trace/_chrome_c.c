/* rldbg.trace._chrome_c: the exporter's per-event work in C, read straight from the spill's bytes.
 *
 * Why C: the Python exporter decodes every event into a tuple of Python objects (about 1 us an
 * event here) and formats it with f-strings (another 1 to 2 us): 1M events took 2 s or more on
 * two cores, where the goal is 1.5 s. Here the msgpack array the shipping process packed
 * (rldbg.trace.spill) is walked in place, and an event's Chrome JSON is written from its bytes
 * into one buffer: no object per field, no string per event.
 *
 * This module owns no layout and no rule of its own. The exporter's Python (rldbg.trace.export
 * and rldbg.trace.chrome_text) stays the reference and is called for everything off the fast
 * path, so each rule lives in one place:
 *   - a batch this file does not read exactly as msgpack-python would (malformed bytes, a
 *     malformed event, an ext type, a non-scalar key field, a number beyond 64 bits, deep
 *     nesting) is answered None: the caller decodes it in Python, damage reporting included;
 *   - text templates (what precedes an event's timestamp, the args the layout adds, each of
 *     them as a member) come from the Python Formatter, once per distinct key, and are cached
 *     here by the key's bytes;
 *   - an event whose text needs more than templates, times and its args' JSON (a driver call,
 *     args that are not a map or that repeat a layout key of an instant, bytes or non-string
 *     keys in args, a time beyond 64 bits) is handed to the Formatter's Python, and its text
 *     put in its place.
 * What is written here is what the Python writes, byte for byte (tests/test_chrome_c.py compares
 * both over spills made to reach every branch): json.dumps(separators=(",", ":"),
 * ensure_ascii=False) of the same values, floats as repr() writes them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define FIELDS 11
#define MAX_DEPTH 32
#define FLUSH_AT (64 * 1024)   /* below glibc's mmap threshold: each piece handed to write() reuses heap memory */
#define CACHE_MAX 200000       /* as chrome_text._CACHE_MAX: beyond it a cache starts over */

/* ---- reading msgpack in place --------------------------------------------------------------- */

enum { K_NIL, K_BOOL, K_INT, K_UINT, K_FLOAT, K_STR, K_BIN, K_ARRAY, K_MAP };

typedef struct {
    int kind;
    int64_t i;             /* K_INT, K_BOOL */
    uint64_t u;            /* K_UINT: above INT64_MAX only */
    double f;              /* K_FLOAT */
    const unsigned char *s;   /* K_STR, K_BIN */
    Py_ssize_t len;        /* K_STR/K_BIN bytes; K_ARRAY/K_MAP elements */
} Obj;

/* UTF-8 as Python's strict decoder accepts it: no overlong forms, no surrogates, <= U+10FFFF. */
static int utf8_ok(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        if (c >= 0xC2 && c <= 0xDF) {
            if (i + 1 >= n || (s[i + 1] & 0xC0) != 0x80) return 0;
            i += 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            if (i + 2 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80) return 0;
            if (c == 0xE0 && c1 < 0xA0) return 0;   /* overlong */
            if (c == 0xED && c1 >= 0xA0) return 0;  /* a surrogate */
            i += 3;
        } else if (c >= 0xF0 && c <= 0xF4) {
            if (i + 3 >= n) return 0;
            unsigned char c1 = s[i + 1];
            if ((c1 & 0xC0) != 0x80 || (s[i + 2] & 0xC0) != 0x80 || (s[i + 3] & 0xC0) != 0x80) return 0;
            if (c == 0xF0 && c1 < 0x90) return 0;   /* overlong */
            if (c == 0xF4 && c1 >= 0x90) return 0;  /* beyond U+10FFFF */
            i += 4;
        } else {
            return 0;
        }
    }
    return 1;
}

static inline uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int k = 0; k < n; k++) v = (v << 8) | p[k];
    return v;
}

/* One item's head at *pos: a scalar, string or bin is consumed whole, an array or map only its
 * header (len = its element count). 0, or -1 where msgpack-python would not read it the same
 * (cut short, the unused byte 0xc1, an ext type, a string that is not UTF-8). */
static int head(const unsigned char *b, Py_ssize_t n, Py_ssize_t *pos, Obj *o) {
    Py_ssize_t p = *pos;
    if (p >= n) return -1;
    unsigned char c = b[p++];
    Py_ssize_t len = 0;
    int lb = 0;
    if (c <= 0x7f) { o->kind = K_INT; o->i = c; goto done; }
    if (c >= 0xe0) { o->kind = K_INT; o->i = (int8_t)c; goto done; }
    if (c <= 0x8f) { o->kind = K_MAP; o->len = c & 0x0f; goto container; }
    if (c <= 0x9f) { o->kind = K_ARRAY; o->len = c & 0x0f; goto container; }
    if (c <= 0xbf) { o->kind = K_STR; len = c & 0x1f; goto bytes; }
    switch (c) {
    case 0xc0: o->kind = K_NIL; goto done;
    case 0xc2: case 0xc3: o->kind = K_BOOL; o->i = c == 0xc3; goto done;
    case 0xc4: case 0xc5: case 0xc6:
        o->kind = K_BIN; lb = 1 << (c - 0xc4); goto sized;
    case 0xd9: case 0xda: case 0xdb:
        o->kind = K_STR; lb = 1 << (c - 0xd9); goto sized;
    case 0xca: {
        if (p + 4 > n) return -1;
        uint32_t w = (uint32_t)be(b + p, 4);
        float f;
        memcpy(&f, &w, 4);
        o->kind = K_FLOAT; o->f = f; p += 4; goto done;
    }
    case 0xcb: {
        if (p + 8 > n) return -1;
        uint64_t w = be(b + p, 8);
        memcpy(&o->f, &w, 8);
        o->kind = K_FLOAT; p += 8; goto done;
    }
    case 0xcc: case 0xcd: case 0xce: case 0xcf: {
        int k = 1 << (c - 0xcc);
        if (p + k > n) return -1;
        uint64_t v = be(b + p, k);
        p += k;
        if (v > (uint64_t)INT64_MAX) { o->kind = K_UINT; o->u = v; }
        else { o->kind = K_INT; o->i = (int64_t)v; }
        goto done;
    }
    case 0xd0: case 0xd1: case 0xd2: case 0xd3: {
        int k = 1 << (c - 0xd0);
        if (p + k > n) return -1;
        uint64_t v = be(b + p, k);
        p += k;
        o->kind = K_INT;
        o->i = k == 1 ? (int8_t)v : k == 2 ? (int16_t)v : k == 4 ? (int32_t)v : (int64_t)v;
        goto done;
    }
    case 0xdc: case 0xdd: case 0xde: case 0xdf: {
        int k = (c == 0xdc || c == 0xde) ? 2 : 4;
        if (p + k > n) return -1;
        o->len = (Py_ssize_t)be(b + p, k);
        p += k;
        o->kind = c <= 0xdd ? K_ARRAY : K_MAP;
        goto container;
    }
    default:
        return -1;   /* 0xc1, and the ext types (msgpack-python makes objects of them) */
    }
sized:
    if (p + lb > n) return -1;
    len = (Py_ssize_t)be(b + p, lb);
    p += lb;
bytes:
    if (len > n - p) return -1;
    if (o->kind == K_STR && !utf8_ok(b + p, len)) return -1;
    o->s = b + p; o->len = len; p += len;
    goto done;
container:
    if (o->len > n - p) return -1;   /* each element takes a byte at least: a cut or lying header */
done:
    *pos = p;
    return 0;
}

/* Past one whole item, checking all of it; map keys must be scalars (hashable as decoded). */
static int skip(const unsigned char *b, Py_ssize_t n, Py_ssize_t *pos, int depth) {
    Obj o;
    if (depth > MAX_DEPTH || head(b, n, pos, &o) < 0) return -1;
    if (o.kind == K_ARRAY) {
        for (Py_ssize_t k = 0; k < o.len; k++)
            if (skip(b, n, pos, depth + 1) < 0) return -1;
    } else if (o.kind == K_MAP) {
        for (Py_ssize_t k = 0; k < o.len; k++) {
            Obj key;
            if (head(b, n, pos, &key) < 0 || key.kind == K_ARRAY || key.kind == K_MAP) return -1;
            if (skip(b, n, pos, depth + 1) < 0) return -1;
        }
    }
    return 0;
}

static inline int scalar(int kind) { return kind != K_ARRAY && kind != K_MAP && kind != K_BIN; }

/* One event's fields: start where its array begins, at[k] where field k starts (at[11]: where the
 * event ends); f[k] the heads of the scalar fields (args, field 10, is only skipped). */
typedef struct {
    Py_ssize_t start;
    Py_ssize_t at[FIELDS + 1];
    Obj f[FIELDS - 1];
} Ev;

enum { PH, CAT, NAME, TS, DUR, ROLE, RANK, STEP, METHOD, FLOW, ARGS };

/* 0, or -1 where the event is not one spill._check keeps with fields this file reads (ph a
 * string, ts/dur/rank ints, the other fields scalars) or is not read exactly as Python would. */
static int event(const unsigned char *b, Py_ssize_t n, Py_ssize_t *pos, Ev *e) {
    Obj a;
    e->start = *pos;
    if (head(b, n, pos, &a) < 0 || a.kind != K_ARRAY || a.len != FIELDS) return -1;
    for (int k = 0; k < ARGS; k++) {
        e->at[k] = *pos;
        if (head(b, n, pos, &e->f[k]) < 0 || !scalar(e->f[k].kind)) return -1;
    }
    e->at[ARGS] = *pos;
    if (skip(b, n, pos, 1) < 0) return -1;
    e->at[FIELDS] = *pos;
    if (e->f[PH].kind != K_STR || e->f[TS].kind != K_INT || e->f[DUR].kind != K_INT || e->f[RANK].kind != K_INT)
        return -1;
    return 0;
}

/* The batch's event count (the events follow at *pos), or -1 when it is not an array. Each event
 * is then read and checked by event() as it is used: the first that fails, or bytes after the
 * last, make the whole batch the Python's (its caller drops what it made of the batch so far). */
static Py_ssize_t batch_head(const unsigned char *b, Py_ssize_t n, Py_ssize_t *pos) {
    Obj a;
    *pos = 0;
    if (head(b, n, pos, &a) < 0 || a.kind != K_ARRAY) return -1;
    return a.len;
}

static PyObject *to_object(const Obj *o) {
    switch (o->kind) {
    case K_NIL: Py_RETURN_NONE;
    case K_BOOL: return PyBool_FromLong((long)o->i);
    case K_INT: return PyLong_FromLongLong(o->i);
    case K_UINT: return PyLong_FromUnsignedLongLong(o->u);
    case K_FLOAT: return PyFloat_FromDouble(o->f);
    case K_STR: return PyUnicode_DecodeUTF8((const char *)o->s, o->len, "strict");
    }
    PyErr_SetString(PyExc_SystemError, "rldbg.trace._chrome_c: not a scalar");
    return NULL;
}

static inline int is_str(const Obj *o, const char *s, Py_ssize_t len) {
    return o->kind == K_STR && o->len == len && memcmp(o->s, s, len) == 0;
}

/* ---- pass 1: what the index learns from a batch ----------------------------------------------- */

PyDoc_STRVAR(index_batch_doc,
"index_batch(events) -> (n, min_ts, role_ranks, calls, driver_flows) | None\n\n"
"What rldbg.trace.export._Index.see_batch_events learns from a batch's packed events:\n"
"their count, the smallest ts, the distinct (role, rank) in first-seen order, the call\n"
"slices as (flow, role, rank, ts + dur) (cat \"call\", ph \"X\", a flow), the flows of the\n"
"driver calls. None when the batch is not read here exactly as Python reads it.");

static PyObject *index_batch(PyObject *mod, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, pos, count = batch_head(b, n, &pos);
    PyObject *seen = NULL, *rrs = NULL, *calls = NULL, *dflows = NULL, *out = NULL;
    if (count < 0) goto python;
    int64_t min_ts = INT64_MAX;
    const unsigned char *prev = NULL;
    Py_ssize_t prev_len = 0;
    if (!(seen = PyDict_New()) || !(rrs = PyList_New(0)) || !(calls = PyList_New(0)) || !(dflows = PyList_New(0)))
        goto fail;
    for (Py_ssize_t k = 0; k < count; k++) {
        Ev e;
        if (event(b, n, &pos, &e) < 0) goto python;
        if (e.f[TS].i < min_ts) min_ts = e.f[TS].i;
        const unsigned char *rr = b + e.at[ROLE];
        Py_ssize_t rr_len = e.at[STEP] - e.at[ROLE];
        if (!(prev && rr_len == prev_len && memcmp(rr, prev, rr_len) == 0)) {   /* most batches: one rank */
            PyObject *key = PyBytes_FromStringAndSize((const char *)rr, rr_len);
            if (!key) goto fail;
            int has = PyDict_Contains(seen, key);
            if (has == 0) {
                PyObject *role = to_object(&e.f[ROLE]), *rank = role ? to_object(&e.f[RANK]) : NULL;
                PyObject *t = rank ? PyTuple_Pack(2, role, rank) : NULL;
                Py_XDECREF(role);
                Py_XDECREF(rank);
                has = t && PyDict_SetItem(seen, key, Py_None) == 0 && PyList_Append(rrs, t) == 0 ? 1 : -1;
                Py_XDECREF(t);
            }
            Py_DECREF(key);
            if (has < 0) goto fail;
            prev = rr;
            prev_len = rr_len;
        }
        if (!is_str(&e.f[CAT], "call", 4) || e.f[FLOW].kind == K_NIL || e.f[PH].len != 1) continue;
        char ph = (char)e.f[PH].s[0];
        if (ph == 'D') {
            PyObject *flow = to_object(&e.f[FLOW]);
            if (!flow || PyList_Append(dflows, flow) < 0) { Py_XDECREF(flow); goto fail; }
            Py_DECREF(flow);
        } else if (ph == 'X') {
            int64_t end;
            if (__builtin_add_overflow(e.f[TS].i, e.f[DUR].i, &end)) goto python;   /* Python's ints do not overflow */
            PyObject *flow = to_object(&e.f[FLOW]), *role = flow ? to_object(&e.f[ROLE]) : NULL;
            PyObject *rank = role ? to_object(&e.f[RANK]) : NULL;
            PyObject *t = rank ? Py_BuildValue("(NNNL)", flow, role, rank, (long long)end) : NULL;
            if (!t) {
                if (!rank) { Py_XDECREF(flow); Py_XDECREF(role); }
                goto fail;
            }
            int r = PyList_Append(calls, t);
            Py_DECREF(t);
            if (r < 0) goto fail;
        }
    }
    if (pos != n) goto python;   /* bytes after the array: msgpack-python refuses the record */
    out = Py_BuildValue("(nLOOO)", count, (long long)(count ? min_ts : 0), rrs, calls, dflows);
    goto fail;
python:   /* not read here as Python reads it: None, and the caller decodes the batch */
    out = Py_NewRef(Py_None);
fail:
    Py_XDECREF(seen);
    Py_XDECREF(rrs);
    Py_XDECREF(calls);
    Py_XDECREF(dflows);
    PyBuffer_Release(&view);
    return out;
}

/* ---- pass 2: the events' text ---------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    PyObject *fmt;      /* the Python Formatter (rldbg.trace.chrome_text): templates and fallbacks */
    PyObject *pcache;   /* (ph, cat, name, role, rank) bytes -> the text up to the ts digits */
    PyObject *acache;   /* (ph, cat is "call", role, rank, step, method) bytes -> (layout args JSON, members) */
    PyObject *ccache;   /* counter key bytes (name, role, rank) -> prefix bytes */
    PyObject *scache;   /* (role, rank) bytes -> slot int or None (the rank's place in bind ids) */
    Py_ssize_t n_slots;
    char *buf;
    Py_ssize_t len, cap;
} Writer;

static int grow(Writer *w, Py_ssize_t more) {
    if (w->len + more <= w->cap) return 0;
    Py_ssize_t cap = w->cap ? w->cap : 2 * FLUSH_AT;
    while (cap < w->len + more) cap *= 2;
    char *nb = PyMem_Realloc(w->buf, cap);
    if (!nb) { PyErr_NoMemory(); return -1; }
    w->buf = nb;
    w->cap = cap;
    return 0;
}

static inline int put(Writer *w, const char *s, Py_ssize_t n) {
    if (grow(w, n) < 0) return -1;
    memcpy(w->buf + w->len, s, n);
    w->len += n;
    return 0;
}

#define PUTS(w, lit) put((w), (lit), (Py_ssize_t)sizeof(lit) - 1)

static int put_bytes(Writer *w, PyObject *bytes) {
    return put(w, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

static int put_u64(Writer *w, uint64_t v) {
    char tmp[24];
    int k = 24;
    do { tmp[--k] = (char)('0' + v % 10); v /= 10; } while (v);
    return put(w, tmp + k, 24 - k);
}

static int put_i64(Writer *w, int64_t v) {
    if (v >= 0) return put_u64(w, (uint64_t)v);
    if (PUTS(w, "-") < 0) return -1;
    return put_u64(w, (uint64_t)0 - (uint64_t)v);
}

/* ns as the layout's µs: Python's divmod(v, 1000) (floor, so -1 ns is "-1.999") then 3 digits. */
static int put_us(Writer *w, int64_t v) {
    int64_t q = v / 1000, r = v % 1000;
    if (r < 0) { r += 1000; q -= 1; }
    char d[3] = {(char)('0' + r / 100), (char)('0' + r / 10 % 10), (char)('0' + r % 10)};
    if (put_i64(w, q) < 0 || PUTS(w, ".") < 0) return -1;
    return put(w, d, 3);
}

/* A string as json's encoder writes it with ensure_ascii=False. */
static int put_str(Writer *w, const unsigned char *s, Py_ssize_t n) {
    static const char hex[] = "0123456789abcdef";
    if (grow(w, n + 2) < 0) return -1;
    w->buf[w->len++] = '"';
    Py_ssize_t run = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        if (put(w, (const char *)s + run, i - run) < 0) return -1;
        run = i + 1;
        char esc[6] = {'\\', 0, 0, 0, 0, 0};
        int k = 2;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        default:
            esc[1] = 'u'; esc[2] = '0'; esc[3] = '0'; esc[4] = hex[c >> 4]; esc[5] = hex[c & 15]; k = 6;
        }
        if (put(w, esc, k) < 0) return -1;
    }
    if (put(w, (const char *)s + run, n - run) < 0) return -1;
    return PUTS(w, "\"");
}

static int put_float(Writer *w, double f) {
    if (isnan(f)) return PUTS(w, "NaN");
    if (isinf(f)) return f > 0 ? PUTS(w, "Infinity") : PUTS(w, "-Infinity");
    char *s = PyOS_double_to_string(f, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);   /* float.__repr__ */
    if (!s) return -1;
    int r = put(w, s, (Py_ssize_t)strlen(s));
    PyMem_Free(s);
    return r;
}

/* A map's string keys, as put_json found them (at most MAX_KEYS). */
#define MAX_KEYS 16
typedef struct {
    Py_ssize_t n;
    const unsigned char *s[MAX_KEYS];
    Py_ssize_t len[MAX_KEYS];
} Keys;

static int has_key(const Keys *k, const char *s, Py_ssize_t len) {
    for (Py_ssize_t j = 0; j < k->n; j++)
        if (k->len[j] == len && memcmp(k->s[j], s, len) == 0) return 1;
    return 0;
}

/* The JSON of one (checked) item at *pos. 0 written; 1 not written here (bytes, a non-string
 * or repeated key: the Python writes those); -1 an error set. `open_only`: a map's text without
 * its closing brace (the caller adds more members); `keys`: where a map's keys go. */
static int put_json(Writer *w, const unsigned char *b, Py_ssize_t n, Py_ssize_t *pos, int open_only, Keys *keys) {
    Obj o;
    head(b, n, pos, &o);   /* checked by event() */
    switch (o.kind) {
    case K_NIL: return PUTS(w, "null");
    case K_BOOL: return o.i ? PUTS(w, "true") : PUTS(w, "false");
    case K_INT: return put_i64(w, o.i);
    case K_UINT: return put_u64(w, o.u);
    case K_FLOAT: return put_float(w, o.f);
    case K_STR: return put_str(w, o.s, o.len);
    case K_BIN: return 1;
    case K_ARRAY:
        if (PUTS(w, "[") < 0) return -1;
        for (Py_ssize_t k = 0; k < o.len; k++) {
            int r;
            if ((k && PUTS(w, ",") < 0) || (r = put_json(w, b, n, pos, 0, NULL)) < 0) return -1;
            if (r) return 1;
        }
        return PUTS(w, "]");
    case K_MAP: {
        Keys mine;
        Keys *k = keys ? keys : &mine;
        k->n = 0;
        if (PUTS(w, "{") < 0) return -1;
        for (Py_ssize_t j = 0; j < o.len; j++) {
            Obj key;
            int r;
            head(b, n, pos, &key);
            if (key.kind != K_STR || j >= MAX_KEYS) return 1;   /* json writes 1 as "1"; many keys: the Python checks repeats */
            if (has_key(k, (const char *)key.s, key.len)) return 1;   /* a key twice: a dict keeps one */
            k->s[j] = key.s;
            k->len[j] = key.len;
            k->n = j + 1;
            if ((j && PUTS(w, ",") < 0) || put_str(w, key.s, key.len) < 0 || PUTS(w, ":") < 0) return -1;
            if ((r = put_json(w, b, n, pos, 0, NULL)) != 0) return r;
        }
        return open_only ? 0 : PUTS(w, "}");
    }
    }
    return 1;
}

/* What `not args` says of the args at *pos: 1 falsy (None, False, 0, 0.0, "", b"", (), {}). */
static int falsy(const unsigned char *b, Py_ssize_t n, Py_ssize_t pos, Obj *o) {
    head(b, n, &pos, o);
    switch (o->kind) {
    case K_NIL: return 1;
    case K_BOOL: case K_INT: return o->i == 0;
    case K_UINT: return 0;
    case K_FLOAT: return o->f == 0.0;
    default: return o->len == 0;
    }
}

static PyObject *cached(PyObject *cache, PyObject *key, PyObject *fmt, const char *method, PyObject *arg) {
    PyObject *got = PyDict_GetItemWithError(cache, key);   /* borrowed */
    if (got || PyErr_Occurred()) return got;
    PyObject *made = PyObject_CallMethod(fmt, method, "(O)", arg);   /* "(O)": a tuple is one argument */
    if (!made) return NULL;
    if (PyDict_GET_SIZE(cache) > CACHE_MAX) PyDict_Clear(cache);
    int r = PyDict_SetItem(cache, key, made);
    Py_DECREF(made);
    return r < 0 ? NULL : PyDict_GetItemWithError(cache, key);
}

static PyObject *tuple_of(const Ev *e, const int *fields, int k) {
    PyObject *t = PyTuple_New(k);
    if (!t) return NULL;
    for (int j = 0; j < k; j++) {
        PyObject *v = to_object(&e->f[fields[j]]);
        if (!v) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, j, v);
    }
    return t;
}

/* The cached value for the key made of a one-byte tag (when tag >= 0) and the raw bytes of the
 * field runs [segs[0], segs[1]), [segs[2], segs[3]), ...; on a miss the Formatter's `method` is
 * asked with the fields given. Borrowed from the cache. */
static PyObject *lookup(Writer *w, PyObject *cache, const unsigned char *b, const Ev *e, const int *segs, int nsegs,
                        int tag, const char *method, const int *fields, int k) {
    Py_ssize_t len = tag >= 0;
    for (int j = 0; j < nsegs; j++) len += e->at[segs[2 * j + 1]] - e->at[segs[2 * j]];
    PyObject *key = PyBytes_FromStringAndSize(NULL, len);
    if (!key) return NULL;
    char *kb = PyBytes_AS_STRING(key);
    if (tag >= 0) *kb++ = (char)tag;
    for (int j = 0; j < nsegs; j++) {
        Py_ssize_t from = e->at[segs[2 * j]], l = e->at[segs[2 * j + 1]] - from;
        memcpy(kb, b + from, l);
        kb += l;
    }
    PyObject *got = PyDict_GetItemWithError(cache, key);
    if (!got && !PyErr_Occurred()) {
        PyObject *arg = tuple_of(e, fields, k);
        got = arg ? cached(cache, key, w->fmt, method, arg) : NULL;
        Py_XDECREF(arg);
    }
    Py_DECREF(key);
    return got;
}

/* A slice's or instant's layout args from the Formatter's members, each (name, text, 0 or 1): 1
 * says the text is `"step":` and the event's step follows it (the one member that changes from
 * step to step: cached without it, a run's thousands of steps share one entry). Members whose
 * name is in `skip` (the event's own args' keys) are left out. */
static int put_members(Writer *w, PyObject *members, const unsigned char *b, Py_ssize_t n, const Ev *e,
                       const Keys *skip, int first) {
    Py_ssize_t k = PyTuple_GET_SIZE(members);
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *m = PyTuple_GET_ITEM(members, j), *name = PyTuple_GET_ITEM(m, 0);
        if (skip && has_key(skip, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))) continue;
        if ((!first && PUTS(w, ",") < 0) || put_bytes(w, PyTuple_GET_ITEM(m, 1)) < 0) return -1;
        first = 0;
        if (PyTuple_GET_ITEM(m, 2) == Py_True) {
            Py_ssize_t at = e->at[STEP];
            if (put_json(w, b, n, &at, 0, NULL) != 0) return -1;   /* a scalar (checked): always written */
        }
    }
    return 0;
}

static int members_ok(PyObject *members) {
    if (!PyTuple_Check(members)) return 0;
    for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(members); j++) {
        PyObject *m = PyTuple_GET_ITEM(members, j);
        if (!PyTuple_Check(m) || PyTuple_GET_SIZE(m) != 3 || !PyBytes_Check(PyTuple_GET_ITEM(m, 0))
                || !PyBytes_Check(PyTuple_GET_ITEM(m, 1)) || !PyBool_Check(PyTuple_GET_ITEM(m, 2)))
            return 0;
    }
    return 1;
}

static const int PREFIX_FIELDS[] = {PH, CAT, NAME, ROLE, RANK};
static const int TEMPLATE_FIELDS[] = {PH, CAT, NAME, ROLE, RANK, STEP, METHOD};
static const int COUNTER_FIELDS[] = {NAME, ROLE, RANK};
static const int SLOT_FIELDS[] = {ROLE, RANK};

/* The event's text by the Python Formatter, each text followed by ",\n"; returns how many. */
static Py_ssize_t fallback(Writer *w, const unsigned char *b, const Ev *e, PyObject *off) {
    PyObject *raw = PyBytes_FromStringAndSize((const char *)b + e->start, e->at[FIELDS] - e->start);
    PyObject *texts = raw ? PyObject_CallMethod(w->fmt, "_packed_fallback", "OO", raw, off) : NULL;
    Py_XDECREF(raw);
    if (!texts) return -1;
    if (!PyList_Check(texts)) {
        Py_DECREF(texts);
        PyErr_SetString(PyExc_TypeError, "Formatter._packed_fallback must return a list of str");
        return -1;
    }
    Py_ssize_t k = PyList_GET_SIZE(texts);
    for (Py_ssize_t j = 0; j < k; j++) {
        PyObject *enc = PyUnicode_AsEncodedString(PyList_GET_ITEM(texts, j), "utf-8", "replace");
        int r = enc ? put_bytes(w, enc) : -1;
        Py_XDECREF(enc);
        if (r < 0 || PUTS(w, ",\n") < 0) { Py_DECREF(texts); return -1; }
    }
    Py_DECREF(texts);
    return k;
}

/* The bind id of a call slice (export._Index.bind_id), or -1 for none. */
static int64_t bind_id(Writer *w, const unsigned char *b, const Ev *e, int *err) {
    const Obj *flow = &e->f[FLOW];
    if (flow->kind != K_INT || flow->i < 0) return -1;   /* None, not an int, or beyond 63 bits: no arrow */
    static const int SEGS[] = {ROLE, STEP};
    PyObject *slot = lookup(w, w->scache, b, e, SEGS, 1, -1, "_packed_slot", SLOT_FIELDS, 2);
    if (!slot) { *err = 1; return -1; }
    if (slot == Py_None) return -1;
    long long s = PyLong_AsLongLong(slot);
    if (s == -1 && PyErr_Occurred()) { *err = 1; return -1; }
    __int128 fid = (__int128)flow->i * w->n_slots + s + 1;
    return fid < ((__int128)1 << 63) ? (int64_t)fid : -1;
}

/* One event's text at the end of the buffer, followed by ",\n": 1 written, 0 skipped (a phase
 * the layout does not write), 2 the Python's to write, -1 an error set. */
static int one(Writer *w, const unsigned char *b, Py_ssize_t n, const Ev *e, int64_t base) {
    const Obj *ph = &e->f[PH];
    int64_t ts;
    if (ph->len != 1 || __builtin_add_overflow(e->f[TS].i, base, &ts)) return ph->len == 1 ? 2 : 0;
    char p = (char)ph->s[0];
    Py_ssize_t at_args = e->at[ARGS];
    Obj args;
    int r;
    if (p == 'C') {
        static const int SEGS[] = {NAME, TS, ROLE, STEP};
        PyObject *pre = lookup(w, w->ccache, b, e, SEGS, 2, -1, "_packed_counter", COUNTER_FIELDS, 3);
        if (!pre || put_bytes(w, pre) < 0 || put_us(w, ts) < 0 || PUTS(w, "\",\"args\":") < 0) return -1;
        if ((r = put_json(w, b, n, &at_args, 0, NULL)) != 0) return r < 0 ? -1 : 2;
        return PUTS(w, "},\n") < 0 ? -1 : 1;
    }
    if (p != 'X' && p != 'i') return p == 'D' ? 2 : 0;
    /* The layout's args depend on the phase, the role/rank, the method, whether the step is
     * None and whether the category is "call" (tag bits 0 and 1), not on the step's value. */
    static const int PREFIX_SEGS[] = {PH, TS, ROLE, STEP};
    static const int ARGS_SEGS[] = {PH, CAT, ROLE, STEP, METHOD, FLOW};
    int tag = is_str(&e->f[CAT], "call", 4) | (e->f[STEP].kind == K_NIL) << 1;
    PyObject *pre = lookup(w, w->pcache, b, e, PREFIX_SEGS, 2, -1, "_packed_prefix", PREFIX_FIELDS, 5);
    PyObject *members = pre ? lookup(w, w->acache, b, e, ARGS_SEGS, 3, tag, "_packed_args", TEMPLATE_FIELDS, 7)
                            : NULL;
    if (!members) return -1;
    if (!PyBytes_Check(pre) || !members_ok(members)) {
        PyErr_SetString(PyExc_TypeError, "Formatter._packed_prefix/_packed_args: bytes, ((bytes, bytes, bool), ...)");
        return -1;
    }
    if (put_bytes(w, pre) < 0 || put_us(w, ts) < 0) return -1;
    if (p == 'X') {
        if (PUTS(w, "\",\"dur\":\"") < 0 || put_us(w, e->f[DUR].i) < 0) return -1;
    }
    if (PUTS(w, "\",\"args\":{") < 0) return -1;
    if (falsy(b, n, at_args, &args)) {
        if (put_members(w, members, b, n, e, NULL, 1) < 0) return -1;
    } else if (args.kind == K_MAP) {
        /* The event's args, then the layout's members they lack: for a slice its args win where
         * both name a key; for an instant the layout's would, which the Python merges. */
        Keys keys;
        Py_ssize_t at = at_args;
        w->len--;   /* the brace put_json writes */
        if ((r = put_json(w, b, n, &at, 1, &keys)) != 0) return r < 0 ? -1 : 2;
        for (Py_ssize_t j = 0; p == 'i' && j < PyTuple_GET_SIZE(members); j++) {
            PyObject *name = PyTuple_GET_ITEM(PyTuple_GET_ITEM(members, j), 0);
            if (has_key(&keys, PyBytes_AS_STRING(name), PyBytes_GET_SIZE(name))) return 2;
        }
        if (put_members(w, members, b, n, e, p == 'X' ? &keys : NULL, 0) < 0) return -1;
    } else {
        return 2;   /* args that are not a map: the Python merges them */
    }
    if (PUTS(w, "}") < 0) return -1;
    if (p == 'X' && is_str(&e->f[CAT], "call", 4) && e->f[FLOW].kind != K_NIL) {
        int err = 0;
        int64_t fid = bind_id(w, b, e, &err);
        if (err) return -1;
        if (fid >= 0) {
            if (PUTS(w, ",\"bind_id\":") < 0 || put_i64(w, fid) < 0 || PUTS(w, ",\"flow_in\":true,\"flow_out\":true") < 0)
                return -1;
        }
    }
    return PUTS(w, "},\n") < 0 ? -1 : 1;
}

PyDoc_STRVAR(writer_batch_doc,
"batch(events, off, write) -> int | None\n\n"
"A batch's packed events as the Formatter's text (each line ending \",\\n\"), handed to\n"
"write() in pieces under 64 KB; `off` (int ns) puts the batch's process on the collector's\n"
"clock. Returns the lines written, or None, having written nothing, when the batch is not\n"
"read here exactly as Python reads it (the caller decodes it and formats it in Python).");

static PyObject *writer_batch(Writer *w, PyObject *args) {
    PyObject *data, *off, *write;
    if (!PyArg_ParseTuple(args, "OO!O:batch", &data, &PyLong_Type, &off, &write)) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *b = view.buf;
    Py_ssize_t n = view.len, pos, count = batch_head(b, n, &pos), written = 0;
    PyObject *origin = NULL, *basep = NULL, *out = NULL;
    long long base;
    int overflow = 0;
    w->len = 0;
    if (count < 0) goto python;
    if (!(origin = PyObject_GetAttrString(w->fmt, "origin")) || !(basep = PyNumber_Subtract(off, origin))) goto fail;
    base = PyLong_AsLongLongAndOverflow(basep, &overflow);
    if (base == -1 && PyErr_Occurred()) goto fail;
    /* The whole batch is made before any of it is written: an event found unreadable drops it. */
    for (Py_ssize_t k = 0; k < count; k++) {
        Ev e;
        if (event(b, n, &pos, &e) < 0) goto python;
        Py_ssize_t mark = w->len;
        int r = overflow ? 2 : one(w, b, n, &e, (int64_t)base);
        if (r < 0) goto fail;
        if (r == 2) {
            w->len = mark;   /* whatever it began to write */
            Py_ssize_t got = fallback(w, b, &e, off);
            if (got < 0) goto fail;
            written += got;
        } else {
            written += r;
        }
    }
    if (pos != n) goto python;   /* bytes after the array: msgpack-python refuses the record */
    /* Handed over in pieces of FLUSH_AT bytes (where they are cut does not matter to the file). */
    for (Py_ssize_t at = 0; at < w->len; at += FLUSH_AT) {
        PyObject *chunk = PyBytes_FromStringAndSize(w->buf + at, Py_MIN(FLUSH_AT, w->len - at));
        PyObject *r = chunk ? PyObject_CallOneArg(write, chunk) : NULL;
        Py_XDECREF(chunk);
        if (!r) goto fail;
        Py_DECREF(r);
    }
    out = PyLong_FromSsize_t(written);
    goto fail;
python:   /* not read here as Python reads it: nothing written, None, the caller decodes the batch */
    out = Py_NewRef(Py_None);
fail:
    w->len = 0;
    Py_XDECREF(origin);
    Py_XDECREF(basep);
    PyBuffer_Release(&view);
    return out;
}

static int writer_init(Writer *w, PyObject *args, PyObject *kw) {
    PyObject *fmt;
    Py_ssize_t n_slots;
    static char *names[] = {"formatter", "n_slots", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On:Writer", names, &fmt, &n_slots)) return -1;
    Py_INCREF(fmt);
    Py_XSETREF(w->fmt, fmt);
    w->n_slots = n_slots;
    Py_XSETREF(w->pcache, PyDict_New());
    Py_XSETREF(w->acache, PyDict_New());
    Py_XSETREF(w->ccache, PyDict_New());
    Py_XSETREF(w->scache, PyDict_New());
    return w->pcache && w->acache && w->ccache && w->scache ? 0 : -1;
}

static int writer_traverse(Writer *w, visitproc visit, void *arg) {
    Py_VISIT(w->fmt);
    Py_VISIT(w->pcache);
    Py_VISIT(w->acache);
    Py_VISIT(w->ccache);
    Py_VISIT(w->scache);
    return 0;
}

static int writer_clear(Writer *w) {
    Py_CLEAR(w->fmt);
    Py_CLEAR(w->pcache);
    Py_CLEAR(w->acache);
    Py_CLEAR(w->ccache);
    Py_CLEAR(w->scache);
    return 0;
}

static void writer_dealloc(Writer *w) {
    PyObject_GC_UnTrack(w);
    writer_clear(w);
    PyMem_Free(w->buf);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef writer_methods[] = {
    {"batch", (PyCFunction)writer_batch, METH_VARARGS, writer_batch_doc},
    {NULL}
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "rldbg.trace._chrome_c.Writer",
    .tp_doc = "Writer(formatter, n_slots): packed events -> the Formatter's Chrome JSON lines.",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)writer_init,
    .tp_traverse = (traverseproc)writer_traverse,
    .tp_clear = (inquiry)writer_clear,
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_methods = writer_methods,
};

static PyMethodDef module_methods[] = {
    {"index_batch", index_batch, METH_O, index_batch_doc},
    {NULL}
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "rldbg.trace._chrome_c",
    "The exporter's per-event work in C over the spill's bytes (see rldbg/trace/_chrome_c.c).", -1,
    module_methods,
};

PyMODINIT_FUNC PyInit__chrome_c(void) {
    if (PyType_Ready(&WriterType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
