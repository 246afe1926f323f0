/* rldbg.trace._lines_c: `rldbg report`'s reading of a trace's lines, in C.
 *
 * Why C: the report parsed every event of a trace into Python objects (orjson), split them by
 * phase and kept a few: on a million events that took 4 to 6 s here, where the goal is 3 s,
 * and most of it went to events the report drops (user spans and marks) or reads two numbers
 * of (memory and ledger counters), and the rest to making dicts twice (orjson's, then the
 * report's record). Here a piece of the file is walked line by line in place:
 *   - a user span or mark the report does not read is checked and skipped, with no object made;
 *   - a counter sample is filed straight into the caller's dict as (ts, value) tuples;
 *   - a slice the report keeps (a worker call, transition, step, driver call) becomes the
 *     report's record of it directly: Trace.add()'s {name, ts, dur, end, role, ...};
 *   - every other line (metadata, the instants it reads, anything unusual) is copied out
 *     verbatim, and the caller parses those with orjson as before.
 *
 * Trace.add() (rldbg.trace.report_trace) stays the reference: which slices, instants and
 * counters the report keeps comes from it on each call (scan_rules()), the rule for a valid event
 * stays rldbg.trace.load.phases', and what is made here is what add() makes of the same event
 * (tests/test_lines_c.py compares both over lines made to reach every branch). What is decided
 * here is only whether a line can be answered without Python, and "no" is always safe: the line
 * goes to the caller. A line is answered here only when:
 *   - it holds exactly one JSON object, then a comma (none on the array's last line);
 *   - orjson would read it, and to the same values: strict UTF-8, no \u escape (orjson refuses
 *     lone surrogates), no number with an exponent over two digits or an integer part over 19
 *     digits (orjson refuses 1e400 and turns integers beyond 64 bits into floats);
 *   - none of ph, pid, name, ts, dur, cat, args appears twice in it (the last would win);
 *   - the fields it is judged on have the plain form rldbg's exporter writes: strings without
 *     escapes, ts and dur as "123.456", a counter's values scalars, a role a string.
 * The kept slices of a range are made here all or none (then they come back as text), so that
 * they reach their lists in file order either way. A range that is not one JSON value after
 * another, one or more per line, each line but the array's last ending in a comma, is answered
 * None: the caller reads the file the tolerant way (rldbg.trace.load), exactly as when orjson
 * refused a piece.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define MAX_DEPTH 512     /* nesting validated here; deeper: the caller's tolerant reader */
#define MAX_ARGS 16       /* an event's args members looked at; more: the caller's */
#define MAX_KEEP 16       /* kept slice categories / instant names the caller may name */
#define MAX_TRACKS 64     /* counter tracks remembered within one call */

typedef const unsigned char *P;

enum { V_STR, V_INT, V_FLOAT, V_TRUE, V_FALSE, V_NULL, V_OBJ, V_ARR };

typedef struct {
    int kind;
    P s;            /* strings: the text between the quotes; numbers: their text */
    Py_ssize_t n;
    int plain;      /* strings: ASCII, no escape; numbers: read here (<= 18 digits before the point,
                       an exponent of at most two digits) */
    int esc;        /* strings: an escape in it (the text is not the string's UTF-8) */
} Val;

typedef struct {
    P p, e;         /* cursor and the line's end */
    int unsafe;     /* a \u escape, or a number orjson might read otherwise: the caller's */
} Cur;

static inline void ws(Cur *c) {
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\t' || *c->p == '\r' || *c->p == '\n'))
        c->p++;
}

/* The bytes a string's text runs over without a second look: printable ASCII but the quote and
 * the backslash (a table: one load a byte, where five comparisons made this the hottest loop). */
static unsigned char run_on[256];

static void init_run_on(void) {
    for (int ch = 0x20; ch < 0x80; ch++)
        run_on[ch] = ch != '"' && ch != '\\';
}

/* c->p at the opening quote. -1: not valid JSON. */
static int string(Cur *c, Val *v) {
    P p = c->p + 1, e = c->e;
    v->kind = V_STR;
    v->s = p;
    v->plain = 1;
    v->esc = 0;
    for (;;) {
        while (p < e && run_on[*p])
            p++;
        if (p >= e)
            return -1;
        unsigned char ch = *p;
        if (ch == '"')
            break;
        if (ch < 0x20)
            return -1;
        v->plain = 0;
        if (ch == '\\') {
            v->esc = 1;
            if (p + 1 >= e)
                return -1;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u':
                if (p + 6 > e)
                    return -1;
                for (int k = 2; k < 6; k++)
                    if (!((p[k] >= '0' && p[k] <= '9') || ((p[k] | 0x20) >= 'a' && (p[k] | 0x20) <= 'f')))
                        return -1;
                c->unsafe = 1;
                p += 6;
                continue;
            default:
                return -1;
            }
        }
        /* UTF-8 as orjson (Rust's str) accepts it: no overlong form, no surrogate, <= U+10FFFF */
        if (ch >= 0xC2 && ch <= 0xDF) {
            if (p + 1 >= e || (p[1] & 0xC0) != 0x80) return -1;
            p += 2;
        } else if (ch >= 0xE0 && ch <= 0xEF) {
            if (p + 2 >= e || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return -1;
            if ((ch == 0xE0 && p[1] < 0xA0) || (ch == 0xED && p[1] >= 0xA0)) return -1;
            p += 3;
        } else if (ch >= 0xF0 && ch <= 0xF4) {
            if (p + 3 >= e || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80)
                return -1;
            if ((ch == 0xF0 && p[1] < 0x90) || (ch == 0xF4 && p[1] >= 0x90)) return -1;
            p += 4;
        } else {
            return -1;
        }
    }
    v->n = p - v->s;
    c->p = p + 1;
    return 0;
}

static inline int is_digit(unsigned char ch) { return ch >= '0' && ch <= '9'; }

/* JSON's number grammar. */
static int number(Cur *c, Val *v) {
    P p = c->p, e = c->e;
    v->s = p;
    v->kind = V_INT;
    if (p < e && *p == '-')
        p++;
    P ip = p;
    if (p < e && *p == '0')
        p++;
    else if (p < e && *p >= '1' && *p <= '9')
        while (p < e && is_digit(*p)) p++;
    else
        return -1;
    /* orjson reads integers up to 2^64 as such: 19 digits are safe; 18 fit a long long here */
    int safe = p - ip <= 19, plain = p - ip <= 18;
    if (p < e && *p == '.') {
        p++;
        if (p >= e || !is_digit(*p)) return -1;
        while (p < e && is_digit(*p)) p++;
        v->kind = V_FLOAT;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-')) p++;
        if (p >= e || !is_digit(*p)) return -1;
        P ep = p;
        while (p < e && is_digit(*p)) p++;
        v->kind = V_FLOAT;
        /* repr() writes small and large floats so (1e-05, -2.79e-09: a run's metrics are full of
         * them); an exponent of two digits keeps the value a finite double above the subnormals,
         * which both orjson and Python's float() read correctly rounded, so to the same value.
         * Longer exponents are the Python's (orjson refuses 1e400). */
        if (p - ep > 2)
            plain = safe = 0;
    }
    v->n = p - v->s;
    v->plain = plain && v->n < 64;
    if (!safe)
        c->unsafe = 1;
    c->p = p;
    return 0;
}

static int value(Cur *c, Val *v, int depth);

/* Past a container's opening bracket: 1 when it closes at once (and past it), else 0. */
static int opens_empty(Cur *c, unsigned char close) {
    c->p++;
    ws(c);
    if (c->p < c->e && *c->p == close) {
        c->p++;
        return 1;
    }
    return 0;
}

/* An object member's key and its colon. -1: not valid JSON. */
static int key_colon(Cur *c, Val *k) {
    ws(c);
    if (c->p >= c->e || *c->p != '"' || string(c, k) < 0)
        return -1;
    ws(c);
    if (c->p >= c->e || *c->p != ':')
        return -1;
    c->p++;
    return 0;
}

/* After a member or element: 1 at a comma (another follows), 0 at the closing bracket (and past
 * it), -1: anything else. */
static int after_item(Cur *c, unsigned char close) {
    ws(c);
    if (c->p >= c->e)
        return -1;
    if (*c->p == ',') {
        c->p++;
        return 1;
    }
    if (*c->p != close)
        return -1;
    c->p++;
    return 0;
}

/* c->p at '{' or '['. */
static int container(Cur *c, int depth) {
    if (depth > MAX_DEPTH)
        return -1;
    unsigned char close = *c->p == '{' ? '}' : ']';
    Val v;
    int more = !opens_empty(c, close);
    while (more) {
        if ((close == '}' && key_colon(c, &v) < 0) || value(c, &v, depth + 1) < 0
            || (more = after_item(c, close)) < 0)
            return -1;
    }
    return 0;
}

static int value(Cur *c, Val *v, int depth) {
    ws(c);
    if (c->p >= c->e)
        return -1;
    P p = c->p;
    Py_ssize_t left = c->e - p;
    switch (*p) {
    case '"':
        return string(c, v);
    case '{': case '[':
        v->kind = *p == '{' ? V_OBJ : V_ARR;
        v->s = p;
        if (container(c, depth) < 0)
            return -1;
        v->n = c->p - p;
        return 0;
    case 't':
        if (left < 4 || memcmp(p, "true", 4)) return -1;
        v->kind = V_TRUE; c->p += 4; return 0;
    case 'f':
        if (left < 5 || memcmp(p, "false", 5)) return -1;
        v->kind = V_FALSE; c->p += 5; return 0;
    case 'n':
        if (left < 4 || memcmp(p, "null", 4)) return -1;
        v->kind = V_NULL; c->p += 4; return 0;
    default:
        return number(c, v);
    }
}

/* ---- one event ------------------------------------------------------------------------------ */

enum { K_PH, K_PID, K_NAME, K_TS, K_DUR, K_CAT, K_ARGS, N_KEYS };

typedef struct {
    Val f[N_KEYS];
    int has[N_KEYS];
    int dup;                    /* one of them twice */
    int nargs;                  /* args members read into arg_key/arg_val (when args is an object) */
    int args_many;              /* more than MAX_ARGS members: which keys it has is not known here */
    int args_odd;               /* that, or a repeated key, a key or value not plain, or a nested
                                   value: its members are not taken as a counter's samples */
    Val arg_key[MAX_ARGS], arg_val[MAX_ARGS];
} Event;

/* Which of ph, pid, name, ts, dur, cat, args a key is; -1: none (a key written with an escape
 * is none of them only if the escape is not \u, which makes the line the caller's anyway). */
static int key_index(const Val *k) {
    P s = k->s;
    if (!k->plain)
        return -1;
    switch (k->n) {
    case 2:
        return s[0] == 'p' && s[1] == 'h' ? K_PH : s[0] == 't' && s[1] == 's' ? K_TS : -1;
    case 3:
        return !memcmp(s, "pid", 3) ? K_PID : !memcmp(s, "dur", 3) ? K_DUR : !memcmp(s, "cat", 3) ? K_CAT : -1;
    case 4:
        return !memcmp(s, "name", 4) ? K_NAME : !memcmp(s, "args", 4) ? K_ARGS : -1;
    default:
        return -1;
    }
}

static inline int same(const Val *a, const Val *b) {
    return a->n == b->n && !memcmp(a->s, b->s, a->n);
}

/* The args object's members, c->p at its '{'. */
static int args_object(Cur *c, Event *ev) {
    Val k, v;
    P start = c->p;
    int more = !opens_empty(c, '}');
    while (more) {
        if (key_colon(c, &k) < 0 || value(c, &v, 3) < 0)
            return -1;
        if (ev->nargs == MAX_ARGS) {
            ev->args_many = ev->args_odd = 1;
        } else if (!ev->args_many) {
            int scalar = v.kind != V_OBJ && v.kind != V_ARR && (v.kind != V_STR || v.plain)
                         && (v.kind != V_INT && v.kind != V_FLOAT ? 1 : v.plain);
            if (!k.plain || !scalar)
                ev->args_odd = 1;
            for (int i = 0; i < ev->nargs; i++)
                if (same(&ev->arg_key[i], &k))
                    ev->args_odd = 1;
            ev->arg_key[ev->nargs] = k;
            ev->arg_val[ev->nargs++] = v;
        }
        if ((more = after_item(c, '}')) < 0)
            return -1;
    }
    ev->f[K_ARGS].kind = V_OBJ;
    ev->f[K_ARGS].s = start;
    ev->f[K_ARGS].n = c->p - start;
    return 0;
}

/* A top-level object, c->p at its '{': validated, its keys of interest noted. */
static int event(Cur *c, Event *ev) {
    Val k, v;
    memset(ev->has, 0, sizeof ev->has);
    ev->dup = ev->nargs = ev->args_many = ev->args_odd = 0;
    int more = !opens_empty(c, '}');
    while (more) {
        if (key_colon(c, &k) < 0)
            return -1;
        int i = key_index(&k);
        if (i >= 0 && ev->has[i])
            ev->dup = 1;
        ws(c);
        if (i == K_ARGS && c->p < c->e && *c->p == '{') {
            ev->nargs = ev->args_many = ev->args_odd = 0;
            if (args_object(c, ev) < 0)
                return -1;
        } else if (value(c, i >= 0 ? &ev->f[i] : &v, 2) < 0) {
            return -1;
        }
        if (i >= 0)
            ev->has[i] = 1;
        if ((more = after_item(c, '}')) < 0)
            return -1;
    }
    return 0;
}

/* "123.456" / "-1.5" / "7": digits with an optional fraction, which float() reads. */
static int decimal_text(const Val *v) {
    if (v->kind != V_STR || !v->plain || v->n == 0)
        return 0;
    P p = v->s, e = v->s + v->n;
    if (*p == '-')
        p++;
    P d = p;
    while (p < e && is_digit(*p)) p++;
    if (p == d)
        return 0;
    if (p < e && *p == '.') {
        P f = ++p;
        while (p < e && is_digit(*p)) p++;
        if (p == f)
            return 0;
    }
    return p == e;
}

/* A time the phase rule accepts: a number, or a decimal's text. */
static int time_ok(const Val *v) {
    return v->kind == V_INT || v->kind == V_FLOAT || decimal_text(v);
}

/* The signed number v's digits spell, a point skipped: an integer's value, or "123.456" µs as
 * ns. v is an integer or decimal text of at most 18 digits (the caller checked). */
static long long digits_of(const Val *v) {
    long long x = 0;
    P p = v->s, e = v->s + v->n;
    int neg = *p == '-';
    if (neg)
        p++;
    for (; p < e; p++)
        if (*p != '.')
            x = x * 10 + (*p - '0');
    return neg ? -x : x;
}

/* rldbg's "123.456" µs as ns (the report's own reading of it); 0: another form. */
static int ms_text_ns(const Val *v, long long *out) {
    if (!decimal_text(v) || v->n < 5 || v->s[v->n - 4] != '.' || v->n > 20)
        return 0;
    *out = digits_of(v);
    return 1;
}

/* ---- the caller's rules, as C arrays for the call ---------------------------------------------- */

typedef struct {
    const char *s;
    Py_ssize_t n;
    const char *need;   /* a kept slice: the key its args must have (needs), if any */
    Py_ssize_t need_n;
    int needs;
    PyObject *into;     /* a kept slice: the list its records go to (borrowed from the caller) */
} Keep;

typedef struct {
    Keep x[MAX_KEEP];       /* slice categories kept: all of them, or those whose args have `need` */
    int nx;
    Keep i[MAX_KEEP];       /* instant names kept */
    int ni;
} Rules;

static int utf8_of(PyObject *s, const char **out, Py_ssize_t *n) {
    if (!PyUnicode_Check(s)) {
        PyErr_SetString(PyExc_TypeError, "rule names must be str");
        return -1;
    }
    *out = PyUnicode_AsUTF8AndSize(s, n);
    return *out ? 0 : -1;
}

static int rules_of(PyObject *x_keep, PyObject *i_keep, PyObject *into, Rules *r) {
    if (!PyDict_Check(x_keep) || !PyAnySet_Check(i_keep) || !PyDict_Check(into)) {
        PyErr_SetString(PyExc_TypeError, "x_keep and into must be dicts and i_keep a set");
        return -1;
    }
    if (PyDict_GET_SIZE(x_keep) > MAX_KEEP || PySet_GET_SIZE(i_keep) > MAX_KEEP) {
        PyErr_SetString(PyExc_ValueError, "too many kept names");
        return -1;
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    Py_hash_t h;
    r->nx = r->ni = 0;
    while (PyDict_Next(x_keep, &pos, &k, &v)) {
        Keep *x = &r->x[r->nx++];
        if (utf8_of(k, &x->s, &x->n) < 0)
            return -1;
        x->needs = v != Py_None;
        if (x->needs && utf8_of(v, &x->need, &x->need_n) < 0)
            return -1;
        x->into = PyDict_GetItemWithError(into, k);
        if (x->into == NULL || !PyList_Check(x->into)) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "into[%R] must be a list", k);
            return -1;
        }
    }
    pos = 0;
    while (_PySet_NextEntry(i_keep, &pos, &k, &h)) {
        Keep *x = &r->i[r->ni++];
        if (utf8_of(k, &x->s, &x->n) < 0)
            return -1;
    }
    return 0;
}

static const Keep *kept(const Keep *list, int n, const Val *v) {
    for (int i = 0; i < n; i++)
        if (list[i].n == v->n && !memcmp(list[i].s, v->s, v->n))
            return &list[i];
    return NULL;
}

/* ---- counters ----------------------------------------------------------------------------------- */

typedef struct {
    long long pid;
    P name;
    Py_ssize_t name_n;
    PyObject *series_of;        /* borrowed from the caller's dict: {series: [(ts, value)]}, or False */
    int nseries;
    P series[MAX_ARGS];
    Py_ssize_t series_n[MAX_ARGS];
    PyObject *list[MAX_ARGS];   /* borrowed from series_of */
} Track;

typedef struct {
    PyObject *counters, *wanted;
    Track t[MAX_TRACKS];
    int n;
} Tracks;

/* Short plain strings made once: a trace repeats its keys and most of its values (roles, method
 * names) on every line, and a str made anew is also hashed anew when it goes into a dict. */
#define STR_CACHE 1024
#define STR_CACHED_MAX 32
static PyObject *str_cache[STR_CACHE];

static PyObject *plain_str(P s, Py_ssize_t n) {
    if (n > STR_CACHED_MAX)
        return PyUnicode_FromStringAndSize((const char *)s, n);
    uint32_t h = 2166136261u;
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 16777619u;
    PyObject **slot = &str_cache[h & (STR_CACHE - 1)];
    if (*slot && PyUnicode_GET_LENGTH(*slot) == n && !memcmp(PyUnicode_1BYTE_DATA(*slot), s, n))
        return Py_NewRef(*slot);
    PyObject *u = PyUnicode_FromStringAndSize((const char *)s, n);
    if (u == NULL || PyObject_Hash(u) == -1) {   /* hashed once, here */
        Py_XDECREF(u);
        return NULL;
    }
    Py_XSETREF(*slot, Py_NewRef(u));
    return u;
}

static PyObject *scalar(const Val *v) {
    char buf[64];
    switch (v->kind) {
    case V_INT: return PyLong_FromLongLong(digits_of(v));
    case V_FLOAT:
        memcpy(buf, v->s, v->n);
        buf[v->n] = 0;
        double d = PyOS_string_to_double(buf, NULL, NULL);
        return d == -1.0 && PyErr_Occurred() ? NULL : PyFloat_FromDouble(d);
    case V_STR: return v->plain ? plain_str(v->s, v->n) : PyUnicode_FromStringAndSize((const char *)v->s, v->n);
    case V_TRUE: Py_RETURN_TRUE;
    case V_FALSE: Py_RETURN_FALSE;
    default: Py_RETURN_NONE;
    }
}

/* The caller's entry for (pid, name): found in this call's cache, or in the dict, or made there
 * ({} when wanted(name) says so, else False). */
static Track *track(Tracks *ts, long long pid, const Val *name) {
    for (int i = 0; i < ts->n; i++)
        if (ts->t[i].pid == pid && ts->t[i].name_n == name->n && !memcmp(ts->t[i].name, name->s, name->n))
            return &ts->t[i];
    if (ts->n == MAX_TRACKS)
        ts->n = 0;   /* a trace with that many tracks in one piece: start the cache over */
    PyObject *p = PyLong_FromLongLong(pid);
    PyObject *s = p ? PyUnicode_FromStringAndSize((const char *)name->s, name->n) : NULL;
    PyObject *key = s ? PyTuple_Pack(2, p, s) : NULL;
    PyObject *got = key ? PyDict_GetItemWithError(ts->counters, key) : NULL;
    Track *t = NULL;
    if (got == NULL && key != NULL && !PyErr_Occurred()) {
        PyObject *w = PyObject_CallOneArg(ts->wanted, s);
        int yes = w ? PyObject_IsTrue(w) : -1;
        Py_XDECREF(w);
        PyObject *made = yes < 0 ? NULL : yes ? PyDict_New() : Py_NewRef(Py_False);
        if (made != NULL && PyDict_SetItem(ts->counters, key, made) == 0)
            got = made;   /* the dict holds it */
        Py_XDECREF(made);
    }
    if (got != NULL) {
        t = &ts->t[ts->n++];
        t->pid = pid;
        t->name = name->s;
        t->name_n = name->n;
        t->series_of = got;
        t->nseries = 0;
    }
    Py_XDECREF(p); Py_XDECREF(s); Py_XDECREF(key);
    return t;
}

static PyObject *series_list(Track *t, const Val *k) {
    for (int i = 0; i < t->nseries; i++)
        if (t->series_n[i] == k->n && !memcmp(t->series[i], k->s, k->n))
            return t->list[i];
    PyObject *s = PyUnicode_FromStringAndSize((const char *)k->s, k->n);
    if (s == NULL)
        return NULL;
    PyObject *l = PyDict_GetItemWithError(t->series_of, s);
    if (l == NULL && !PyErr_Occurred()) {
        PyObject *made = PyList_New(0);
        if (made != NULL && PyDict_SetItem(t->series_of, s, made) == 0)
            l = made;
        Py_XDECREF(made);
    }
    Py_DECREF(s);
    if (l != NULL && !PyList_Check(l)) {
        PyErr_SetString(PyExc_TypeError, "a counter series is not a list");
        return NULL;
    }
    if (l != NULL && t->nseries < MAX_ARGS) {
        t->series[t->nseries] = k->s;
        t->series_n[t->nseries] = k->n;
        t->list[t->nseries++] = l;
    }
    return l;
}

static int file_counter(Tracks *ts, const Event *ev, long long t_ns) {
    Track *t = track(ts, digits_of(&ev->f[K_PID]), &ev->f[K_NAME]);
    if (t == NULL)
        return -1;
    if (t->series_of == Py_False)
        return 0;
    if (!PyDict_Check(t->series_of)) {
        PyErr_SetString(PyExc_TypeError, "a counter track is neither a dict nor False");
        return -1;
    }
    PyObject *when = PyLong_FromLongLong(t_ns);
    if (when == NULL)
        return -1;
    int rc = 0;
    for (int i = 0; i < ev->nargs && rc == 0; i++) {
        PyObject *l = series_list(t, &ev->arg_key[i]);
        PyObject *v = l ? scalar(&ev->arg_val[i]) : NULL;
        PyObject *pair = v ? PyTuple_Pack(2, when, v) : NULL;
        rc = pair ? PyList_Append(l, pair) : -1;
        Py_XDECREF(v); Py_XDECREF(pair);
    }
    Py_DECREF(when);
    return rc;
}

/* ---- a kept slice's record ----------------------------------------------------------------------- */

/* The Python value of a validated JSON value's text as orjson makes it, for the forms read here.
 * 0, 1: a form left to the Python (an escape, a number not read here, a key repeated), -1: an
 * exception. */
static int build(Cur *c, PyObject **out, int depth) {
    Val v;
    ws(c);
    if (c->p >= c->e || depth > MAX_DEPTH)
        return 1;
    if (*c->p != '{' && *c->p != '[') {
        if (value(c, &v, depth) < 0 || (v.kind == V_STR && v.esc)
            || ((v.kind == V_INT || v.kind == V_FLOAT) && !v.plain))
            return 1;
        *out = scalar(&v);
        return *out ? 0 : -1;
    }
    int obj = *c->p == '{';
    unsigned char close = obj ? '}' : ']';
    PyObject *o = obj ? PyDict_New() : PyList_New(0);
    Py_ssize_t members = 0;
    int rc = 0;
    if (o == NULL)
        return -1;
    int more = !opens_empty(c, close);
    while (more && rc == 0) {
        PyObject *k = NULL, *x = NULL;
        if (obj) {   /* the text was validated: only a key with an escape stops here */
            if (key_colon(c, &v) < 0 || v.esc)
                rc = 1;
            else if ((k = scalar(&v)) == NULL)
                rc = -1;
        }
        if (rc == 0)
            rc = build(c, &x, depth + 1);
        if (rc == 0)
            rc = obj ? PyDict_SetItem(o, k, x) : PyList_Append(o, x);
        Py_XDECREF(k);
        Py_XDECREF(x);
        members++;
        if (rc == 0 && (more = after_item(c, close)) < 0)
            rc = 1;
    }
    if (rc == 0 && obj && PyDict_GET_SIZE(o) != members)
        rc = 1;   /* a key repeated: orjson's order of keys is not promised here */
    if (rc != 0) {
        Py_DECREF(o);
        return rc;
    }
    *out = o;
    return 0;
}

static PyObject *k_name, *k_ts, *k_dur, *k_end, *k_role, *k_rank, *k_step, *k_method, *k_flow, *k_args, *g_zero;
static PyObject *k_mem_before, *k_mem_after, *k_frees, *k_loads;

/* Whether a record's fields have the types rldbg writes (rldbg.trace.report_trace's _RECORD_TYPES
 * and the args it checks): those that do not are the Python's to count and skip. Exact types: a
 * bool is not an int. The numbers read here are finite (see number()). -1: an exception. */
static int conforms(PyObject *name, PyObject *rank, PyObject *step, PyObject *method, PyObject *flow,
                    PyObject *a) {
    if (!PyUnicode_CheckExact(name) || (rank && !PyLong_CheckExact(rank))
        || (step && step != Py_None && !PyLong_CheckExact(step))
        || (method && method != Py_None && !PyUnicode_CheckExact(method))
        || (flow && flow != Py_None && !PyLong_CheckExact(flow) && !PyUnicode_CheckExact(flow)))
        return 0;
    PyObject *mem[2] = {k_mem_before, k_mem_after}, *lists[2] = {k_frees, k_loads};
    for (int i = 0; i < 2; i++) {
        PyObject *v = PyDict_GetItemWithError(a, mem[i]);
        if (v == NULL && PyErr_Occurred())
            return -1;
        if (v && v != Py_None && !PyLong_CheckExact(v) && !PyFloat_CheckExact(v))
            return 0;
        if ((v = PyDict_GetItemWithError(a, lists[i])) == NULL && PyErr_Occurred())
            return -1;
        if (v && v != Py_None) {
            if (!PyList_CheckExact(v))
                return 0;
            for (Py_ssize_t j = 0; j < PyList_GET_SIZE(v); j++)
                if (!PyUnicode_CheckExact(PyList_GET_ITEM(v, j)))
                    return 0;
        }
    }
    return 1;
}

/* A kept slice's record, as rldbg.trace.report_trace.Trace.add() makes it from the event:
 * {name, ts, dur, end, role, rank, step, method, flow, args}, times in ns. 0, 1: not in the forms
 * read here (a role not a string among them), -1: an exception. *unnamed: a new reference to its pid when it has no role of its
 * own and its process is not named yet (Trace.finish() names it), else NULL. */
static int record(const Event *ev, PyObject *names, PyObject **out, PyObject **unnamed) {
    const Val *f = ev->f;
    long long t, d = 0;
    *unnamed = NULL;
    if (!ms_text_ns(&f[K_TS], &t) || (ev->has[K_DUR] && !ms_text_ns(&f[K_DUR], &d))
        || (ev->has[K_NAME] && (f[K_NAME].kind != V_STR || f[K_NAME].esc))
        || (ev->has[K_PID] && (f[K_PID].kind != V_INT || !f[K_PID].plain)))
        return 1;
    PyObject *a = NULL, *name = NULL, *pid = NULL, *ts = NULL, *dur = NULL, *end = NULL, *rec = NULL;
    int rc = -1;
    if (ev->has[K_ARGS] && f[K_ARGS].kind == V_OBJ) {
        Cur c = {f[K_ARGS].s, f[K_ARGS].s + f[K_ARGS].n, 0};
        if ((rc = build(&c, &a, 3)) != 0)
            goto done;
        rc = -1;
    } else if ((a = PyDict_New()) == NULL) {
        goto done;
    }
    name = ev->has[K_NAME] ? scalar(&f[K_NAME]) : Py_NewRef(Py_None);
    pid = ev->has[K_PID] ? scalar(&f[K_PID]) : Py_NewRef(Py_None);
    ts = PyLong_FromLongLong(t);
    dur = PyLong_FromLongLong(d);
    end = PyLong_FromLongLong(t + d);
    if (!name || !pid || !ts || !dur || !end || (rec = PyDict_New()) == NULL)
        goto done;
    PyObject *role = PyDict_GetItemWithError(a, k_role);
    if (role == NULL && !PyErr_Occurred()) {
        role = PyDict_GetItemWithError(names, pid);
        if (role == NULL && !PyErr_Occurred()) {
            role = Py_None;   /* Trace.finish() names it */
            *unnamed = Py_NewRef(pid);
        }
    }
    if (role == NULL)
        goto done;
    if (*unnamed == NULL && !PyUnicode_CheckExact(role)) {
        rc = 1;   /* a role that is not a string: Trace.add()'s rule makes it one */
        goto done;
    }
    PyObject *rank = PyDict_GetItemWithError(a, k_rank), *step = NULL, *method = NULL, *flow = NULL;
    if ((rank == NULL && PyErr_Occurred())
        || ((step = PyDict_GetItemWithError(a, k_step)) == NULL && PyErr_Occurred())
        || ((method = PyDict_GetItemWithError(a, k_method)) == NULL && PyErr_Occurred())
        || ((flow = PyDict_GetItemWithError(a, k_flow)) == NULL && PyErr_Occurred()))
        goto done;
    int fits = conforms(name, rank, step, method, flow, a);
    if (fits <= 0) {
        rc = fits < 0 ? -1 : 1;
        goto done;
    }
    PyObject *keys[10] = {k_name, k_ts, k_dur, k_end, k_role, k_rank, k_step, k_method, k_flow, k_args};
    PyObject *vals[10] = {name, ts, dur, end, role, rank ? rank : g_zero, step ? step : Py_None,
                          method ? method : Py_None, flow ? flow : Py_None, a};
    for (int i = 0; i < 10; i++)
        if (PyDict_SetItem(rec, keys[i], vals[i]) < 0)
            goto done;
    *out = Py_NewRef(rec);
    rc = 0;
done:
    if (rc != 0)
        Py_CLEAR(*unnamed);
    Py_XDECREF(a); Py_XDECREF(name); Py_XDECREF(pid); Py_XDECREF(ts); Py_XDECREF(dur); Py_XDECREF(end);
    Py_XDECREF(rec);
    return rc;
}

/* ---- one line ------------------------------------------------------------------------------------ */

enum { L_SKIP, L_FILED, L_KEPT, L_OTHER, L_BAD };

/* Whether the phase rule (rldbg.trace.load.phases) counts the event valid, judged on the plain
 * forms only; 0 also where it might but the form is not one read here. */
static int valid(const Event *ev) {
    const Val *f = ev->f;
    if (ev->dup || !ev->has[K_PH] || f[K_PH].kind != V_STR || !f[K_PH].plain || f[K_PH].n != 1)
        return 0;
    if (ev->has[K_ARGS] && f[K_ARGS].kind != V_OBJ && f[K_ARGS].kind != V_NULL)
        return 0;
    unsigned char ph = f[K_PH].s[0];
    if (strchr("XBEiICDbenstfPON", ph)) {   /* the phases with a time (load._NEEDS_TS) */
        if (!ev->has[K_TS] || !time_ok(&f[K_TS]))
            return 0;
        if (ph == 'X' && ev->has[K_DUR] && !time_ok(&f[K_DUR]))
            return 0;
    }
    return 1;
}

/* What the report makes of a valid one-object line: skipped, filed, a slice kept (L_KEPT, *keep
 * says where), or L_OTHER (the caller's). */
static int judge(const Event *ev, const Rules *r, Tracks *ts, const Keep **keep, int *err) {
    const Val *f = ev->f;
    unsigned char ph = f[K_PH].s[0];
    if (ph == 'i' || ph == 'I') {   /* an instant: kept by name */
        if (!ev->has[K_NAME])
            return L_SKIP;
        if (f[K_NAME].kind != V_STR || !f[K_NAME].plain)
            return L_OTHER;
        return kept(r->i, r->ni, &f[K_NAME]) ? L_OTHER : L_SKIP;
    }
    if (ph == 'X') {   /* a slice: kept by cat, and for some cats by a key in its args */
        if (!ev->has[K_CAT])
            return L_SKIP;
        if (f[K_CAT].kind != V_STR || !f[K_CAT].plain)
            return L_OTHER;
        const Keep *k = *keep = kept(r->x, r->nx, &f[K_CAT]);
        if (k == NULL)
            return L_SKIP;
        if (!k->needs)
            return L_KEPT;
        if (!ev->has[K_ARGS] || f[K_ARGS].kind == V_NULL)
            return L_SKIP;
        if (ev->args_many)
            return L_OTHER;
        for (int i = 0; i < ev->nargs; i++)   /* a key with an escape other than \u is never `need` */
            if (ev->arg_key[i].n == k->need_n && !memcmp(ev->arg_key[i].s, k->need, k->need_n))
                return L_KEPT;
        return L_SKIP;
    }
    if (ph != 'C')
        return L_OTHER;
    long long t_ns;
    if (!ms_text_ns(&f[K_TS], &t_ns) || !ev->has[K_PID] || f[K_PID].kind != V_INT
        || !ev->has[K_NAME] || f[K_NAME].kind != V_STR || !f[K_NAME].plain)
        return L_OTHER;
    if (!ev->has[K_ARGS] || f[K_ARGS].kind == V_NULL || (ev->nargs == 0 && !ev->args_odd))
        return L_SKIP;   /* nothing sampled */
    if (ev->args_odd)
        return L_OTHER;
    for (int i = 0; i < ev->nargs; i++)   /* a sample that is not a number: the Python's to count */
        if (ev->arg_val[i].kind != V_INT && ev->arg_val[i].kind != V_FLOAT)
            return L_OTHER;
    if (file_counter(ts, ev, t_ns) < 0) {
        *err = 1;
        return L_BAD;
    }
    return L_FILED;
}

typedef struct {
    char *b;
    Py_ssize_t n, cap;
} Out;

static int out_put(Out *o, const void *s, Py_ssize_t n) {
    if (o->n + n > o->cap) {
        Py_ssize_t cap = (o->cap ? o->cap * 2 : 1 << 16);
        while (cap < o->n + n) cap *= 2;
        char *b = PyMem_Realloc(o->b, cap);
        if (b == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        o->b = b;
        o->cap = cap;
    }
    memcpy(o->b + o->n, s, n);
    o->n += n;
    return 0;
}

PyDoc_STRVAR(scan_doc,
"scan(raw, pos, end, last, x_keep, i_keep, counters, wanted, into, names, unnamed) -> bytes | None\n\n"
"Walks the lines of raw[pos:end] (a trace's event array, pos at a line's start; last: end is\n"
"the array's end), as rldbg.trace.report_trace.Trace.add() would take their events:\n"
"  - a slice whose cat is not in x_keep ({cat: None, or a key its args must have}) and an\n"
"    instant whose name is not in i_keep are skipped;\n"
"  - a counter sample is appended as (ts_ns, value) to counters[(pid, name)][series] (the entry\n"
"    made as {} when wanted(name), else False, which drops the track);\n"
"  - a kept slice's record goes to into[cat] (its role from its args, else names[pid], else None\n"
"    and (index, list, pid) appended to unnamed), when every kept slice of the range is in the\n"
"    forms read here; else none is, and they come back as the other lines do.\n"
"Every other line comes back as JSON text: an object {ph: [events]} when each of them is valid\n"
"by rldbg.trace.load.phases' rule (as phases() would split them), else an array of them all in\n"
"file order; b'' when there are none. None: the range is not one JSON value after another, one\n"
"or more per line, each line but the array's last ending in a comma.");

typedef struct {
    P s;
    Py_ssize_t n;
    unsigned char ph;   /* 0: not known valid */
    int kept;           /* a kept slice: left out when the range's records were made here */
} Line;

typedef struct {
    PyObject *into;     /* borrowed */
    PyObject *rec, *pid;
} Built;

#define MAX_GROUPS 8   /* distinct phases among a piece's other lines, grouped; more: an array */

/* The other lines as the JSON text scan() returns (without the kept slices when `built`). */
static PyObject *other_text(const Line *ls, Py_ssize_t n, int grouped, int built) {
    Out o = {NULL, 0, 0};
    unsigned char phs[MAX_GROUPS];
    int ng = 0, fail = 0, any = 0;
    PyObject *res = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (built && ls[i].kept)
            continue;
        any = 1;
        int g = 0;
        while (g < ng && phs[g] != ls[i].ph) g++;
        if (g == ng) {
            if (ng == MAX_GROUPS)
                grouped = 0;
            else
                phs[ng++] = ls[i].ph;
        }
    }
    if (!any)
        return PyBytes_FromStringAndSize("", 0);
    if (!grouped) {
        int first = 1;
        fail |= out_put(&o, "[", 1);
        for (Py_ssize_t i = 0; i < n && !fail; i++) {
            if (built && ls[i].kept)
                continue;
            fail |= (!first && out_put(&o, ",", 1)) || out_put(&o, ls[i].s, ls[i].n);
            first = 0;
        }
        fail |= out_put(&o, "]", 1);
    } else {
        fail |= out_put(&o, "{", 1);
        for (int g = 0; g < ng && !fail; g++) {
            char head[8] = {',', '"', (char)phs[g], '"', ':', '['};
            fail |= g ? out_put(&o, head, 6) : out_put(&o, head + 1, 5);
            int first = 1;
            for (Py_ssize_t i = 0; i < n && !fail; i++) {
                if (ls[i].ph != phs[g] || (built && ls[i].kept))
                    continue;
                fail |= (!first && out_put(&o, ",", 1)) || out_put(&o, ls[i].s, ls[i].n);
                first = 0;
            }
            fail |= out_put(&o, "]", 1);
        }
        fail |= out_put(&o, "}", 1);
    }
    if (!fail)
        res = PyBytes_FromStringAndSize(o.b, o.n);
    PyMem_Free(o.b);
    return res;
}

/* The range's records into their lists, in file order, and the unnamed ones noted. */
static int commit(const Built *b, Py_ssize_t n, PyObject *unnamed) {
    for (Py_ssize_t i = 0; i < n; i++) {
        if (b[i].pid != NULL) {
            PyObject *at = PyLong_FromSsize_t(PyList_GET_SIZE(b[i].into));
            PyObject *note = at ? PyTuple_Pack(3, at, b[i].into, b[i].pid) : NULL;
            int rc = note ? PyList_Append(unnamed, note) : -1;
            Py_XDECREF(at);
            Py_XDECREF(note);
            if (rc < 0)
                return -1;
        }
        if (PyList_Append(b[i].into, b[i].rec) < 0)
            return -1;
    }
    return 0;
}

static int blank(P p, P e) {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n'))
        p++;
    return p == e;
}

/* *a grown to twice its capacity (1024 items at first); -1 (and *a as it was) when out of memory. */
static int grow(void **a, Py_ssize_t *cap, size_t item) {
    Py_ssize_t c = *cap ? 2 * *cap : 1024;
    void *g = PyMem_Realloc(*a, c * item);
    if (g == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *a = g;
    *cap = c;
    return 0;
}

static PyObject *scan(PyObject *mod, PyObject *args) {
    PyObject *raw, *x_keep, *i_keep, *counters, *wanted, *into, *names, *unnamed;
    Py_ssize_t pos, end;
    int last;
    if (!PyArg_ParseTuple(args, "O!nnpOOO!OOO!O!:scan", &PyBytes_Type, &raw, &pos, &end, &last, &x_keep, &i_keep,
                          &PyDict_Type, &counters, &wanted, &into, &PyDict_Type, &names, &PyList_Type, &unnamed))
        return NULL;
    Py_ssize_t size = PyBytes_GET_SIZE(raw);
    if (pos < 0 || end > size || pos > end) {
        PyErr_Format(PyExc_ValueError, "range %zd:%zd outside the %zd bytes given", pos, end, size);
        return NULL;
    }
    Rules r;
    if (rules_of(x_keep, i_keep, into, &r) < 0)
        return NULL;
    Tracks *ts = PyMem_Malloc(sizeof(Tracks));
    if (ts == NULL)
        return PyErr_NoMemory();
    ts->counters = counters;
    ts->wanted = wanted;
    ts->n = 0;
    Line *ls = NULL;
    Built *bs = NULL;
    Py_ssize_t nls = 0, cap = 0, nbs = 0, bcap = 0;
    Event ev;
    P base = (P)PyBytes_AS_STRING(raw), p = base + pos, stop = base + end;
    int bad = 0, err = 0, grouped = 1, building = 1;
    while (p < stop && !bad && !err) {
        P nl = memchr(p, '\n', stop - p);
        P e = nl ? nl : stop;
        Cur c = {p, e, 0};
        P next = nl ? nl + 1 : stop;
        ws(&c);
        if (c.p == e) {   /* a blank line */
            p = next;
            continue;
        }
        P first = c.p;
        int kind, values = 0, comma = 0;
        P body_end = first;
        Val v;
        if (*c.p == '{')
            kind = event(&c, &ev) < 0 ? L_BAD : L_OTHER;
        else
            kind = value(&c, &v, 1) < 0 ? L_BAD : L_OTHER;
        if (kind != L_BAD) {
            values = 1;
            for (;;) {   /* more values on the line, and its comma */
                body_end = c.p;
                ws(&c);
                if (c.p == e)
                    break;
                if (*c.p != ',') {
                    kind = L_BAD;
                    break;
                }
                c.p++;
                comma = 1;
                ws(&c);
                if (c.p == e)
                    break;
                if (value(&c, &v, 1) < 0) {
                    kind = L_BAD;
                    break;
                }
                values++;
                comma = 0;
            }
        }
        if (kind != L_BAD && !comma && !(last && blank(next, stop)))
            kind = L_BAD;   /* a missing comma: only the array's last value goes without */
        if (kind == L_BAD) {
            bad = 1;
            break;
        }
        int ok = values == 1 && *first == '{' && !c.unsafe && valid(&ev);
        const Keep *keep = NULL;
        if (ok)
            kind = judge(&ev, &r, ts, &keep, &err);
        if (kind == L_KEPT && building) {
            PyObject *rec = NULL, *pid = NULL;
            int rc = record(&ev, names, &rec, &pid);
            if (rc < 0) {
                err = 1;
                break;
            }
            if (rc > 0) {
                building = 0;   /* this one is the Python's: so are the others of the range */
            } else if (nbs == bcap && grow((void **)&bs, &bcap, sizeof(Built)) < 0) {
                Py_DECREF(rec);
                Py_XDECREF(pid);
                err = 1;
                break;
            } else {
                bs[nbs++] = (Built){keep->into, rec, pid};
            }
        }
        if (kind == L_OTHER || kind == L_KEPT) {
            if (nls == cap && grow((void **)&ls, &cap, sizeof(Line)) < 0) {
                err = 1;
                break;
            }
            ls[nls].s = first;
            ls[nls].n = body_end - first;
            ls[nls].kept = kind == L_KEPT;
            ls[nls++].ph = ok ? ev.f[K_PH].s[0] : 0;
            grouped &= ok;
        }
        p = next;
    }
    PyMem_Free(ts);
    PyObject *res = NULL;
    if (!err && !bad && (!building || commit(bs, nbs, unnamed) == 0))
        res = other_text(ls, nls, grouped, building);
    else if (!err && bad)
        res = Py_NewRef(Py_None);
    if (res == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "rldbg.trace._lines_c.scan failed");
    for (Py_ssize_t i = 0; i < nbs; i++) {
        Py_DECREF(bs[i].rec);
        Py_XDECREF(bs[i].pid);
    }
    PyMem_Free(bs);
    PyMem_Free(ls);
    return res;
}

PyDoc_STRVAR(in_order_doc,
"in_order(samples) -> bool\n\n"
"Whether sorting the list would leave it as it is: the counter samples a trace holds come in\n"
"time order, and sorting them anyway compared a million tuples (a third of a second here).\n"
"False also where a comparison fails (the sort then raises as it would have).");

static PyObject *in_order(PyObject *mod, PyObject *l) {
    if (!PyList_Check(l)) {
        PyErr_SetString(PyExc_TypeError, "in_order() takes a list");
        return NULL;
    }
    for (Py_ssize_t i = 1; i < PyList_GET_SIZE(l); i++) {
        PyObject *a = PyList_GET_ITEM(l, i - 1), *b = PyList_GET_ITEM(l, i);
        if (PyTuple_CheckExact(a) && PyTuple_CheckExact(b) && PyTuple_GET_SIZE(a) && PyTuple_GET_SIZE(b)
            && PyLong_CheckExact(PyTuple_GET_ITEM(a, 0)) && PyLong_CheckExact(PyTuple_GET_ITEM(b, 0))) {
            int over = 0;
            long long x = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(a, 0), &over);
            long long y = over ? 0 : PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(b, 0), &over);
            if (!over && x < y)
                continue;
            if (!over && x > y)
                Py_RETURN_FALSE;
        }
        int le = PyObject_RichCompareBool(a, b, Py_LE);   /* equal times, or not plain ints */
        if (le < 0) {
            PyErr_Clear();
            Py_RETURN_FALSE;
        }
        if (!le)
            Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}

static PyMethodDef module_methods[] = {
    {"scan", scan, METH_VARARGS, scan_doc},
    {"in_order", in_order, METH_O, in_order_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "rldbg.trace._lines_c",
    "`rldbg report`'s reading of a trace's lines in C (rldbg.trace.load_pieces uses it).", -1, module_methods,
};

PyMODINIT_FUNC PyInit__lines_c(void) {
    PyObject **slots[14] = {&k_name, &k_ts, &k_dur, &k_end, &k_role, &k_rank, &k_step, &k_method, &k_flow, &k_args,
                            &k_mem_before, &k_mem_after, &k_frees, &k_loads};
    const char *text[14] = {"name", "ts", "dur", "end", "role", "rank", "step", "method", "flow", "args",
                            "mem_before", "mem_after", "frees", "loads"};
    for (int i = 0; i < 14; i++)
        if ((*slots[i] = PyUnicode_InternFromString(text[i])) == NULL)
            return NULL;
    if ((g_zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    init_run_on();
    return PyModule_Create(&module_def);
}
