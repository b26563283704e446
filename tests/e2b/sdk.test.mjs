// The unmodified `e2b` JS SDK (2.51.0, pinned in package-lock.json) against `warren serve`'s
// E2B-compatible API (issue 31). Written against the SDK's public API as its index.d.ts
// declares it; nothing here knows Warren's own API.
//
// Run by tests/e2e/test_e2b_sdk.py, which starts the server, builds the `base:latest` image
// (busybox, with /bin/bash) and sets:
//   E2B_API_URL = E2B_SANDBOX_URL = http://127.0.0.1:PORT   (the server: one listener)
//   E2B_API_KEY = a Warren token                              (E2B_DEBUG unset)
//   WARREN_E2B_RUN = a tag put on every sandbox made here (metadata), so the harness can tell
//                    that none outlives the run.
// By hand: `cd tests/e2b && npm ci && E2B_API_URL=... node --test --test-reporter=spec .`
//
// Every sandbox made here is killed in a finally or in the suite's after hook, and all are
// made with a 5 minute timeout, so even a crashed run leaves nothing behind for long.

import { after, before, describe, it } from 'node:test'
import assert from 'node:assert/strict'
import { createHash, randomBytes } from 'node:crypto'
import { setTimeout as sleep } from 'node:timers/promises'

import {
  AuthenticationError,
  CommandExitError,
  FileNotFoundError,
  FilesystemEventType,
  FileType,
  InvalidArgumentError,
  Sandbox,
  SandboxError,
  SandboxNotFoundError,
  TimeoutError,
} from 'e2b'

const RUN = process.env.WARREN_E2B_RUN || `e2b-${process.pid}-${Date.now()}`
const RUN_KEY = 'warren-e2b-run'
const SANDBOX_TIMEOUT_MS = 300_000
const TEST = { timeout: 60_000 }
const MiB = 1024 * 1024

// -- helpers ------------------------------------------------------------------------------

const created = new Set()

/** Sandbox.create with this run's metadata tag; remembered for the suite's cleanup. */
async function create(opts = {}, template = undefined) {
  const o = {
    timeoutMs: SANDBOX_TIMEOUT_MS,
    ...opts,
    metadata: { [RUN_KEY]: RUN, ...(opts.metadata ?? {}) },
  }
  const sbx = template === undefined ? await Sandbox.create(o) : await Sandbox.create(template, o)
  created.add(sbx.sandboxId)
  return sbx
}

async function killQuietly(sandboxId) {
  try {
    await Sandbox.kill(sandboxId)
  } catch (err) {
    console.error(`warning: could not kill sandbox ${sandboxId}: ${err?.message ?? err}`)
  }
  created.delete(sandboxId)
}

/** Asserts `promise` rejects with an instance of `Cls`; returns the error. */
async function rejectsWith(promise, Cls, what) {
  let caught
  await assert.rejects(promise, (err) => {
    caught = err
    assert.ok(
      err instanceof Cls,
      `${what}: expected ${Cls.name}, got ${err?.constructor?.name}: ${err?.message}`,
    )
    return true
  })
  return caught
}

/** Polls `cond` (sync or async) until it returns something truthy; fails after `ms`.
 * `what` (a string, or a function giving one at the time of failure) says what was awaited. */
async function waitFor(cond, ms, what) {
  const deadline = Date.now() + ms
  for (;;) {
    const v = await cond()
    if (v) return v
    if (Date.now() > deadline) {
      assert.fail(`timed out after ${ms} ms waiting for ${typeof what === 'function' ? what() : what}`)
    }
    await sleep(100)
  }
}

/** Every page of a SandboxPaginator, each page kept apart. */
async function pages(paginator, max = 20) {
  const out = []
  while (paginator.hasNext) {
    out.push(await paginator.nextItems())
    assert.ok(out.length <= max, `more than ${max} pages: the paginator never ends`)
  }
  return out
}

function versionAtLeast(v, min) {
  const a = String(v).split('-')[0].split('.').map(Number)
  const b = min.split('.').map(Number)
  for (let i = 0; i < 3; i++) {
    const x = a[i] ?? 0
    if (x !== b[i]) return x > b[i]
  }
  return true
}

const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex')

function exactArrayBuffer(u8) {
  return u8.buffer.slice(u8.byteOffset, u8.byteOffset + u8.byteLength)
}

async function remoteSha256(sbx, path) {
  const r = await sbx.commands.run(`sha256sum ${path}`)
  return r.stdout.split(/\s+/)[0]
}

// -- the suite ----------------------------------------------------------------------------

describe('e2b SDK 2.51.0 against warren serve', () => {
  /** @type {Sandbox} the shared sandbox: default template ("base"), metadata and envs */
  let sbx

  before(async () => {
    for (const v of ['E2B_API_URL', 'E2B_SANDBOX_URL', 'E2B_API_KEY']) {
      assert.ok(process.env[v], `${v} is not set (see the head of this file)`)
    }
    assert.ok(!process.env.E2B_DEBUG, 'E2B_DEBUG must be unset: it makes the SDK skip the API')
    sbx = await create({ metadata: { role: 'shared' }, envs: { WARREN_E2B_VAR: 'from-create' } })
  })

  after(async () => {
    for (const id of [...created]) await killQuietly(id)
  })

  // -- sandbox ----------------------------------------------------------------------------

  it('creates a sandbox from the default template with metadata and envs', TEST, async () => {
    assert.equal(typeof sbx.sandboxId, 'string')
    assert.ok(sbx.sandboxId.length > 0)
    assert.equal(await sbx.isRunning(), true)

    const info = await sbx.getInfo()
    assert.equal(info.sandboxId, sbx.sandboxId)
    assert.equal(info.state, 'running')
    assert.equal(info.metadata[RUN_KEY], RUN)
    assert.equal(info.metadata.role, 'shared')
    assert.equal(typeof info.templateId, 'string')
    assert.ok(info.templateId.length > 0)
    assert.ok(info.startedAt instanceof Date && !isNaN(info.startedAt))
    assert.ok(info.startedAt.getTime() <= Date.now() + 5_000, `startedAt ${info.startedAt} is in the future`)
    assert.ok(info.endAt > info.startedAt, `endAt ${info.endAt} <= startedAt ${info.startedAt}`)
    // closeStdin needs envd >= 0.5.2, octet-stream uploads >= 0.5.7: below that the SDK
    // silently falls back to multipart, and the octet-stream test would not test anything.
    assert.ok(versionAtLeast(info.envdVersion, '0.5.7'), `envdVersion ${info.envdVersion} < 0.5.7`)

    // The same through the static API, with the id alone.
    const again = await Sandbox.getInfo(sbx.sandboxId)
    assert.equal(again.sandboxId, sbx.sandboxId)
    assert.deepEqual(again.metadata, info.metadata)

    const r = await sbx.commands.run('echo "$WARREN_E2B_VAR"')
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'from-create\n')
    // Per-command envs override the sandbox's.
    const o = await sbx.commands.run('echo "$WARREN_E2B_VAR $OTHER"', {
      envs: { WARREN_E2B_VAR: 'from-run', OTHER: 'x' },
    })
    assert.equal(o.stdout, 'from-run x\n')
  })

  it('connects to a running sandbox by id from a second object', TEST, async () => {
    await sbx.files.write('/tmp/connect-marker', 'seen by both')
    const other = await Sandbox.connect(sbx.sandboxId)
    assert.equal(other.sandboxId, sbx.sandboxId)
    assert.equal(await other.isRunning(), true)
    assert.equal(await other.files.read('/tmp/connect-marker'), 'seen by both')
    assert.equal((await other.commands.run('cat /tmp/connect-marker')).stdout, 'seen by both')
  })

  it('rejects an unknown template', TEST, async () => {
    await rejectsWith(create({}, 'no-such-template-e2b'), SandboxError, 'create from an unknown template')
  })

  it('answers a wrong API key with AuthenticationError', TEST, async () => {
    const apiKey = 'e2b_not_a_warren_token_0123456789'
    const made = Sandbox.create({ apiKey, timeoutMs: SANDBOX_TIMEOUT_MS, metadata: { [RUN_KEY]: RUN } })
      .then((s) => { created.add(s.sandboxId); return s })
    await rejectsWith(made, AuthenticationError, 'create')
    await rejectsWith(Sandbox.list({ apiKey }).nextItems(), AuthenticationError, 'list')
    await rejectsWith(Sandbox.getInfo(sbx.sandboxId, { apiKey }), AuthenticationError, 'getInfo')
    await rejectsWith(Sandbox.kill(sbx.sandboxId, { apiKey }), AuthenticationError, 'kill')
    assert.equal(await sbx.isRunning(), true, 'a kill with a wrong key killed the sandbox')
  })

  it('answers an unknown sandbox id as not found', TEST, async () => {
    const id = 'nosuchsandbox0e2b'
    assert.equal(await Sandbox.kill(id), false)
    await rejectsWith(Sandbox.getInfo(id), SandboxNotFoundError, 'getInfo')
    await rejectsWith(Sandbox.connect(id), SandboxNotFoundError, 'connect')
    await rejectsWith(Sandbox.setTimeout(id, 60_000), SandboxNotFoundError, 'setTimeout')
  })

  it('moves endAt with setTimeout', TEST, async () => {
    const initial = await sbx.getInfo()
    await sbx.setTimeout(600_000)
    const longer = await sbx.getInfo()
    assert.ok(
      Math.abs(longer.endAt.getTime() - (Date.now() + 600_000)) < 30_000,
      `endAt ${longer.endAt.toISOString()} is not about 600 s from now`,
    )
    assert.ok(longer.endAt.getTime() - initial.endAt.getTime() > 200_000,
      `endAt moved from ${initial.endAt.toISOString()} to ${longer.endAt.toISOString()} only`)
    // It can be shortened too (the SDK's docs: "extend or reduce").
    await Sandbox.setTimeout(sbx.sandboxId, 240_000)
    const shorter = await sbx.getInfo()
    assert.ok(
      Math.abs(shorter.endAt.getTime() - (Date.now() + 240_000)) < 30_000,
      `endAt ${shorter.endAt.toISOString()} is not about 240 s from now`,
    )
    await sbx.setTimeout(SANDBOX_TIMEOUT_MS)
  })

  it('lists sandboxes by metadata, one per page', TEST, async () => {
    const tag = `list-${RUN}`
    const a = await create({ metadata: { listtag: tag } })
    try {
      const b = await create({ metadata: { listtag: tag } })
      try {
        const got = await pages(Sandbox.list({ query: { metadata: { listtag: tag } }, limit: 1 }))
        assert.ok(got.length >= 2, `limit 1 with two matches gave ${got.length} page(s)`)
        for (const p of got) assert.ok(p.length <= 1, `a page of ${p.length} with limit 1`)
        const items = got.flat()
        assert.deepEqual(items.map((i) => i.sandboxId).sort(), [a.sandboxId, b.sandboxId].sort())
        for (const i of items) {
          assert.equal(i.metadata.listtag, tag)
          assert.equal(i.metadata[RUN_KEY], RUN)
          assert.equal(i.state, 'running')
          assert.ok(i.startedAt instanceof Date && !isNaN(i.startedAt))
          assert.ok(i.endAt instanceof Date && !isNaN(i.endAt))
        }
        // All in one page; filters combine with AND; a state filter.
        const all = await pages(Sandbox.list({ query: { metadata: { listtag: tag } } }))
        assert.equal(all.flat().length, 2)
        const none = await pages(Sandbox.list({ query: { metadata: { listtag: tag, role: 'nope' } } }))
        assert.equal(none.flat().length, 0)
        const running = await pages(Sandbox.list({ query: { metadata: { listtag: tag }, state: ['running'] } }))
        assert.equal(running.flat().length, 2)
        const paused = await pages(Sandbox.list({ query: { metadata: { listtag: tag }, state: ['paused'] } }))
        assert.equal(paused.flat().length, 0)
      } finally {
        await killQuietly(b.sandboxId)
      }
      // A killed sandbox leaves the list.
      const left = await pages(Sandbox.list({ query: { metadata: { listtag: tag } } }))
      assert.deepEqual(left.flat().map((i) => i.sandboxId), [a.sandboxId])
    } finally {
      await killQuietly(a.sandboxId)
    }
  })

  it('pauses (true, then false) and resumes with Sandbox.connect', TEST, async () => {
    const tag = `pause-${RUN}`
    const s = await create({ metadata: { pausetag: tag } })
    try {
      await s.files.write('/tmp/before-pause', 'kept')
      assert.equal(await s.pause(), true)
      assert.equal((await s.getInfo()).state, 'paused')
      const paused = await pages(Sandbox.list({ query: { metadata: { pausetag: tag }, state: ['paused'] } }))
      assert.deepEqual(paused.flat().map((i) => i.sandboxId), [s.sandboxId])
      assert.equal((await pages(Sandbox.list({ query: { metadata: { pausetag: tag }, state: ['running'] } }))).flat().length, 0)
      assert.equal(await Sandbox.pause(s.sandboxId), false, 'pausing a paused sandbox')

      const resumed = await Sandbox.connect(s.sandboxId)
      assert.equal(resumed.sandboxId, s.sandboxId)
      assert.equal((await resumed.getInfo()).state, 'running')
      assert.equal(await resumed.isRunning(), true)
      assert.equal(await resumed.files.read('/tmp/before-pause'), 'kept')
      assert.equal((await resumed.commands.run('echo resumed')).stdout, 'resumed\n')
      // The first object works again too: the sandbox is the same.
      assert.equal((await s.commands.run('echo again')).stdout, 'again\n')
    } finally {
      await killQuietly(s.sandboxId)
    }
  })

  it('kills: true, then false; afterwards nothing answers', TEST, async () => {
    const s = await create({}, 'base:latest') // NAME:TAG as the template, as is
    let killed = false
    try {
      assert.equal((await s.commands.run('echo up')).stdout, 'up\n')
      assert.equal(await s.kill(), true)
      killed = true
      assert.equal(await Sandbox.kill(s.sandboxId), false, 'a second kill')
      assert.equal(await s.isRunning(), false)
      await rejectsWith(s.commands.run('echo hi'), SandboxNotFoundError, 'commands.run after kill')
      await rejectsWith(s.files.read('/etc/hostname'), TimeoutError, 'files.read after kill')
      await rejectsWith(Sandbox.getInfo(s.sandboxId), SandboxNotFoundError, 'getInfo after kill')
      await rejectsWith(Sandbox.connect(s.sandboxId), SandboxNotFoundError, 'connect after kill')
      const left = await pages(Sandbox.list({ query: { metadata: { [RUN_KEY]: RUN } } }))
      assert.ok(!left.flat().some((i) => i.sandboxId === s.sandboxId), 'a killed sandbox is still listed')
    } finally {
      if (!killed) await killQuietly(s.sandboxId)
      created.delete(s.sandboxId)
    }
  })

  // -- commands ---------------------------------------------------------------------------

  it('runs a command in the foreground: stdout, stderr, callbacks, cwd, root', TEST, async () => {
    const out = []
    const err = []
    const r = await sbx.commands.run('echo out; echo err >&2; echo more', {
      onStdout: (d) => out.push(d),
      onStderr: (d) => err.push(d),
    })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout, 'out\nmore\n')
    assert.equal(r.stderr, 'err\n')
    assert.equal(out.join(''), 'out\nmore\n')
    assert.equal(err.join(''), 'err\n')

    assert.equal((await sbx.commands.run('id -u; pwd')).stdout, '0\n/root\n')
    assert.equal((await sbx.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n')
    assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n')
    // envd's environment: the user's home and name; a cwd that is not there is the caller's error.
    assert.equal((await sbx.commands.run('echo "$HOME $USER"')).stdout, '/root root\n')
    await rejectsWith(sbx.commands.run('pwd', { cwd: '/no/such/dir' }), InvalidArgumentError, 'bad cwd')

    // Several at once.
    const many = await Promise.all(
      [1, 2, 3, 4, 5].map((i) => sbx.commands.run(`sleep 0.2; echo ${i}`)),
    )
    assert.deepEqual(many.map((x) => x.stdout), ['1\n', '2\n', '3\n', '4\n', '5\n'])
  })

  it('runs a terminal: input, output, resize, exit', TEST, async () => {
    let out = ''
    const dec = new TextDecoder()
    const term = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => { out += dec.decode(d, { stream: true }) } })
    const enc = new TextEncoder()
    await sbx.pty.sendInput(term.pid, enc.encode('stty size\n'))
    const until = async (what) => {
      for (let i = 0; i < 100 && !out.includes(what); i++) await sleep(50)
      assert.ok(out.includes(what), `no ${JSON.stringify(what)} in the terminal's output: ${JSON.stringify(out)}`)
    }
    await until('24 80')
    await sbx.pty.resize(term.pid, { cols: 100, rows: 30 })
    await sbx.pty.sendInput(term.pid, enc.encode('stty size; exit 0\n'))
    await until('30 100')
    const r = await term.wait()
    assert.equal(r.exitCode, 0)
  })

  it('rejects a failing command with CommandExitError', TEST, async () => {
    const e = await rejectsWith(
      sbx.commands.run('echo before; echo oops >&2; exit 3'),
      CommandExitError,
      'exit 3',
    )
    assert.equal(e.exitCode, 3)
    assert.equal(e.stdout, 'before\n')
    assert.equal(e.stderr, 'oops\n')
    assert.ok(e instanceof SandboxError)

    // The same through a background handle's wait().
    const h = await sbx.commands.run('exit 7', { background: true })
    const w = await rejectsWith(h.wait(), CommandExitError, 'wait on exit 7')
    assert.equal(w.exitCode, 7)
    assert.equal(h.exitCode, 7)
  })

  it('keeps a background command running after disconnect; connect picks up its output', TEST, async () => {
    const cmd = 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do echo tick$i; sleep 0.25; done'
    const first = []
    const h = await sbx.commands.run(cmd, { background: true, onStdout: (d) => first.push(d) })
    assert.equal(typeof h.pid, 'number')
    try {
      await waitFor(() => h.stdout.includes('tick1\n'), 10_000, 'the first tick')
      await h.disconnect()
      const seenAtDisconnect = first.join('')

      const listed = await sbx.commands.list()
      const p = listed.find((x) => x.pid === h.pid)
      assert.ok(p, `pid ${h.pid} not in commands.list() after disconnect: ${JSON.stringify(listed)}`)
      assert.equal(p.cmd, '/bin/bash')
      assert.ok((p.args ?? []).includes(cmd), `args ${JSON.stringify(p.args)} lack the command`)

      const second = []
      const h2 = await sbx.commands.connect(h.pid, { onStdout: (d) => second.push(d) })
      assert.equal(h2.pid, h.pid)
      const r = await h2.wait()
      assert.equal(r.exitCode, 0)
      assert.ok(r.stdout.includes('tick12\n'), `connect did not see the later output: ${JSON.stringify(r.stdout)}`)
      assert.ok(second.join('').includes('tick12\n'))
      // No output reached the first handle's callback after disconnect.
      assert.equal(first.join(''), seenAtDisconnect)
      assert.ok(!seenAtDisconnect.includes('tick12'))
    } finally {
      await sbx.commands.kill(h.pid).catch(() => {})
    }
  })

  it('kills commands by handle and by pid', TEST, async () => {
    const h = await sbx.commands.run('sleep 40', { background: true })
    assert.equal(await h.kill(), true)
    await assert.rejects(h.wait())
    await waitFor(async () => (await sbx.commands.kill(h.pid)) === false, 10_000,
      'commands.kill of a killed pid to answer false')

    const h2 = await sbx.commands.run('sleep 40', { background: true })
    assert.ok((await sbx.commands.list()).some((x) => x.pid === h2.pid))
    assert.equal(await sbx.commands.kill(h2.pid), true)
    await assert.rejects(h2.wait())
    await waitFor(async () => !(await sbx.commands.list()).some((x) => x.pid === h2.pid), 10_000,
      'the killed command to leave commands.list()')
  })

  it('feeds stdin: sendStdin, then closeStdin', TEST, async () => {
    const h = await sbx.commands.run('cat', { background: true, stdin: true })
    try {
      await sbx.commands.sendStdin(h.pid, 'hello\n')
      await h.sendStdin(new TextEncoder().encode('world\n'))
      await sbx.commands.closeStdin(h.pid)
      const r = await h.wait()
      assert.equal(r.exitCode, 0)
      assert.equal(r.stdout, 'hello\nworld\n')
    } finally {
      await sbx.commands.kill(h.pid).catch(() => {})
    }
    // The handle's own closeStdin.
    const h2 = await sbx.commands.run('wc -c', { background: true, stdin: true })
    await h2.sendStdin('12345')
    await h2.closeStdin()
    assert.equal((await h2.wait()).stdout.trim(), '5')
    // More at once than the sandbox holds unread (1 MiB), to a command slow to read it: all
    // of it arrives, once.
    const h3 = await sbx.commands.run('sleep 1; wc -c', { background: true, stdin: true })
    await sbx.commands.sendStdin(h3.pid, 'y'.repeat(3 * MiB))
    await sbx.commands.closeStdin(h3.pid)
    assert.equal((await h3.wait()).stdout.trim(), String(3 * MiB))
  })

  it('ends a command at its own timeout; the sandbox carries on', TEST, async () => {
    const t0 = Date.now()
    await rejectsWith(sbx.commands.run('sleep 30', { timeoutMs: 1000 }), TimeoutError, 'run with timeoutMs 1000')
    const took = Date.now() - t0
    assert.ok(took < 10_000, `the 1 s command timeout took ${took} ms`)
    assert.equal(await sbx.isRunning(), true)
    assert.equal((await sbx.commands.run('echo alive')).stdout, 'alive\n')
    // The command's deadline ends the command, not just the stream.
    await waitFor(
      async () => !(await sbx.commands.list()).some((p) => (p.args ?? []).some((a) => a.includes('sleep 30'))),
      10_000,
      'the timed-out `sleep 30` to be gone from commands.list()',
    )
  })

  it('returns large output whole (8 MiB)', TEST, async () => {
    let streamed = 0
    const r = await sbx.commands.run('yes aaaaaaaaaaaaaaa | head -c 8388608', {
      onStdout: (d) => { streamed += d.length },
    })
    assert.equal(r.exitCode, 0)
    assert.equal(r.stdout.length, 8 * MiB)
    assert.equal(streamed, 8 * MiB)
    assert.ok(r.stdout === 'aaaaaaaaaaaaaaa\n'.repeat(8 * MiB / 16), 'the 8 MiB of output differ')
  })

  // -- files ------------------------------------------------------------------------------

  it('writes and reads text, making parent directories', TEST, async () => {
    const text = 'héllo wörld ✓\nsecond line\n'
    const info = await sbx.files.write('/tmp/e2b/text/hello.txt', text)
    assert.equal(info.path, '/tmp/e2b/text/hello.txt')
    assert.equal(info.name, 'hello.txt')
    assert.equal(await sbx.files.read('/tmp/e2b/text/hello.txt'), text)
    assert.equal((await sbx.commands.run('cat /tmp/e2b/text/hello.txt')).stdout, text)
    assert.equal(await sbx.files.read('/tmp/e2b/text/hello.txt', { user: 'root' }), text)
    // Overwrite; an empty file.
    await sbx.files.write('/tmp/e2b/text/hello.txt', 'short')
    assert.equal(await sbx.files.read('/tmp/e2b/text/hello.txt'), 'short')
    await sbx.files.write('/tmp/e2b/text/empty', '')
    assert.equal(await sbx.files.read('/tmp/e2b/text/empty'), '')
    assert.equal((await sbx.files.read('/tmp/e2b/text/empty', { format: 'bytes' })).length, 0)
    // A relative path is relative to the home directory (/root).
    await sbx.files.write('relative.txt', 'rel')
    assert.equal((await sbx.commands.run('cat /root/relative.txt')).stdout, 'rel')
    assert.equal(await sbx.files.read('relative.txt'), 'rel')
    // What a command wrote, read as a file.
    await sbx.commands.run('printf "from a command" > /tmp/e2b/text/cmd.txt')
    assert.equal(await sbx.files.read('/tmp/e2b/text/cmd.txt'), 'from a command')
  })

  it('writes and reads binary (every byte value)', TEST, async () => {
    const bytes = new Uint8Array(1024)
    for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256
    await sbx.files.write('/tmp/e2b/bin/all.bin', exactArrayBuffer(bytes))
    const back = await sbx.files.read('/tmp/e2b/bin/all.bin', { format: 'bytes' })
    assert.ok(back instanceof Uint8Array)
    assert.deepEqual(back, bytes)
    const blob = await sbx.files.read('/tmp/e2b/bin/all.bin', { format: 'blob' })
    assert.deepEqual(new Uint8Array(await blob.arrayBuffer()), bytes)
    assert.equal(await remoteSha256(sbx, '/tmp/e2b/bin/all.bin'), sha256(bytes))
    assert.equal((await sbx.files.getInfo('/tmp/e2b/bin/all.bin')).size, 1024)
  })

  it('writes several files at once', TEST, async () => {
    const bin = new Uint8Array([0, 255, 1, 254, 10, 13])
    const infos = await sbx.files.writeFiles([
      { path: '/tmp/e2b/multi/a.txt', data: 'A' },
      { path: '/tmp/e2b/multi/b.bin', data: exactArrayBuffer(bin) },
      { path: '/tmp/e2b/multi/sub/c.txt', data: new Blob(['C C']) },
    ])
    assert.equal(infos.length, 3)
    assert.deepEqual(infos.map((i) => i.path).sort(),
      ['/tmp/e2b/multi/a.txt', '/tmp/e2b/multi/b.bin', '/tmp/e2b/multi/sub/c.txt'])
    assert.equal(await sbx.files.read('/tmp/e2b/multi/a.txt'), 'A')
    assert.deepEqual(await sbx.files.read('/tmp/e2b/multi/b.bin', { format: 'bytes' }), bin)
    assert.equal(await sbx.files.read('/tmp/e2b/multi/sub/c.txt'), 'C C')
    // write() with an array is the same call.
    const two = await sbx.files.write([
      { path: '/tmp/e2b/multi/d.txt', data: 'D' },
      { path: '/tmp/e2b/multi/e.txt', data: 'E' },
    ])
    assert.equal(two.length, 2)
    assert.equal(await sbx.files.read('/tmp/e2b/multi/e.txt'), 'E')
  })

  it('uploads 32 MiB as multipart and as octet-stream, and streams 8 MiB', { timeout: 120_000 }, async () => {
    const big = randomBytes(32 * MiB)
    const want = sha256(big)

    const viaBlob = await sbx.files.write('/tmp/e2b/big/blob.bin', new Blob([big]))
    assert.equal(viaBlob.path, '/tmp/e2b/big/blob.bin')
    assert.equal((await sbx.files.getInfo('/tmp/e2b/big/blob.bin')).size, 32 * MiB)
    assert.equal(await remoteSha256(sbx, '/tmp/e2b/big/blob.bin'), want)
    const back = await sbx.files.read('/tmp/e2b/big/blob.bin', { format: 'bytes' })
    assert.equal(back.length, 32 * MiB)
    assert.equal(sha256(back), want)

    await sbx.files.write('/tmp/e2b/big/octet.bin', exactArrayBuffer(big), { useOctetStream: true })
    assert.equal((await sbx.files.getInfo('/tmp/e2b/big/octet.bin')).size, 32 * MiB)
    assert.equal(await remoteSha256(sbx, '/tmp/e2b/big/octet.bin'), want)

    // A ReadableStream is sent as a streamed octet-stream body (chunked, no length).
    const chunk = 64 * 1024
    const total = 8 * MiB
    const hash = createHash('sha256')
    let sent = 0
    const stream = new ReadableStream({
      pull(controller) {
        if (sent >= total) return controller.close()
        const c = randomBytes(chunk)
        hash.update(c)
        sent += chunk
        controller.enqueue(new Uint8Array(c))
      },
    })
    await sbx.files.write('/tmp/e2b/big/stream.bin', stream)
    assert.equal(await remoteSha256(sbx, '/tmp/e2b/big/stream.bin'), hash.digest('hex'))

    // And read back as a stream.
    const rs = await sbx.files.read('/tmp/e2b/big/stream.bin', { format: 'stream' })
    let got = 0
    for await (const c of rs) got += c.length
    assert.equal(got, total)

    await sbx.commands.run('rm -rf /tmp/e2b/big')
  })

  it('lists a directory', TEST, async () => {
    await sbx.files.writeFiles([
      { path: '/tmp/e2b/ls/one.txt', data: '1' },
      { path: '/tmp/e2b/ls/two.txt', data: '22' },
      { path: '/tmp/e2b/ls/sub/deep.txt', data: '333' },
    ])
    const entries = await sbx.files.list('/tmp/e2b/ls')
    const byName = Object.fromEntries(entries.map((e) => [e.name, e]))
    assert.deepEqual(Object.keys(byName).sort(), ['one.txt', 'sub', 'two.txt'])
    assert.equal(byName['one.txt'].type, FileType.FILE)
    assert.equal(byName['one.txt'].path, '/tmp/e2b/ls/one.txt')
    assert.equal(byName['two.txt'].size, 2)
    assert.equal(byName.sub.type, FileType.DIR)
    assert.equal(byName.sub.path, '/tmp/e2b/ls/sub')

    const deep = await sbx.files.list('/tmp/e2b/ls', { depth: 2 })
    assert.ok(deep.some((e) => e.path === '/tmp/e2b/ls/sub/deep.txt' && e.type === FileType.FILE),
      `depth 2 did not reach sub/deep.txt: ${JSON.stringify(deep.map((e) => e.path))}`)

    await rejectsWith(sbx.files.list('/tmp/e2b/no-such-dir'), FileNotFoundError, 'list of a missing directory')
  })

  it('makes, renames, removes; exists and getInfo', TEST, async () => {
    assert.equal(await sbx.files.makeDir('/tmp/e2b/mk/a/b'), true)
    assert.equal(await sbx.files.makeDir('/tmp/e2b/mk/a/b'), false)
    const dir = await sbx.files.getInfo('/tmp/e2b/mk/a/b')
    assert.equal(dir.type, FileType.DIR)
    assert.equal(dir.name, 'b')
    assert.equal(dir.path, '/tmp/e2b/mk/a/b')

    await sbx.files.write('/tmp/e2b/mk/file.txt', 'twelve bytes')
    const f = await sbx.files.getInfo('/tmp/e2b/mk/file.txt')
    assert.equal(f.type, FileType.FILE)
    assert.equal(f.size, 12)
    assert.equal(f.name, 'file.txt')
    assert.ok(f.modifiedTime instanceof Date && !isNaN(f.modifiedTime), `modifiedTime ${f.modifiedTime}`)

    const moved = await sbx.files.rename('/tmp/e2b/mk/file.txt', '/tmp/e2b/mk/a/renamed.txt')
    assert.equal(moved.path, '/tmp/e2b/mk/a/renamed.txt')
    assert.equal(moved.name, 'renamed.txt')
    assert.equal(await sbx.files.exists('/tmp/e2b/mk/file.txt'), false)
    assert.equal(await sbx.files.exists('/tmp/e2b/mk/a/renamed.txt'), true)
    assert.equal(await sbx.files.read('/tmp/e2b/mk/a/renamed.txt'), 'twelve bytes')

    await sbx.files.remove('/tmp/e2b/mk/a/renamed.txt')
    assert.equal(await sbx.files.exists('/tmp/e2b/mk/a/renamed.txt'), false)
    await sbx.files.remove('/tmp/e2b/mk') // a directory, with what is in it
    assert.equal(await sbx.files.exists('/tmp/e2b/mk'), false)
    assert.equal(await sbx.files.exists('/tmp/e2b/mk/a/b'), false)

    await rejectsWith(sbx.files.read('/tmp/e2b/no-such-file'), FileNotFoundError, 'read of a missing file')
    await rejectsWith(sbx.files.getInfo('/tmp/e2b/no-such-file'), FileNotFoundError, 'getInfo of a missing file')
  })

  it('watches a directory: a file written after the watch started is seen', TEST, async () => {
    await sbx.files.makeDir('/tmp/e2b/watched')
    const events = []
    const handle = await sbx.files.watchDir('/tmp/e2b/watched', (e) => { events.push(e) })
    try {
      await sbx.files.write('/tmp/e2b/watched/new.txt', 'x')
      await waitFor(
        () => events.some((e) => e.name === 'new.txt' && e.type === FilesystemEventType.CREATE),
        10_000,
        () => `a create event for new.txt (events seen: ${JSON.stringify(events)})`,
      )
      for (const e of events) {
        assert.ok(Object.values(FilesystemEventType).includes(e.type), `event type ${e.type}`)
      }
    } finally {
      await handle.stop()
    }
  })
})
