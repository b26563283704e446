// The E2B SDK half of bench/e2b.py: the real `e2b` npm package (tests/e2b/node_modules, 2.51.0)
// doing what an E2B user's loop does, timed per step:
//
//   const sbx = await Sandbox.create()            // template "base" (Warren image base:latest)
//   const r = await sbx.commands.run('echo hi')   // r.stdout must be "hi\n"
//   await sbx.kill()
//
// bench/e2b.py starts it once (one node process, one SDK import, for every iteration) with
// E2B_API_URL = E2B_SANDBOX_URL = the server and E2B_API_KEY = a Warren token, and drives it over
// stdin, one line per batch: `run N` runs N iterations back to back and answers one line
// `@@e2b {"iterations": [{create_ms, cmd_ms, kill_ms, total_ms}, ...]}` (or
// `@@e2b {"error": ..., "sandbox": ID}` after killing the sandbox it was in); `quit` (or EOF)
// ends it. Only lines starting with `@@e2b ` are the protocol: anything else on stdout is
// passed through as a log.
//
// By hand, with a server and a base:latest image: `node bench/e2b_loop.mjs 10` runs 10 and
// prints the same JSON.

import { createRequire } from 'node:module'
import { performance } from 'node:perf_hooks'
import { createInterface } from 'node:readline'
import { fileURLToPath } from 'node:url'

// tests/e2b's node_modules, wherever this is run from (its package.json has no "exports", so
// `import 'e2b'` there resolves to the same dist/index.js).
const E2B_PKG = fileURLToPath(new URL('../tests/e2b/package.json', import.meta.url))
const t0Import = performance.now()
let Sandbox
try {
  ;({ Sandbox } = createRequire(E2B_PKG)('e2b'))
} catch (err) {
  reply({ error: `cannot load e2b from tests/e2b/node_modules (npm ci --prefix tests/e2b): ${err?.message ?? err}` })
  process.exit(2)
}
const importMs = performance.now() - t0Import

function reply(obj) {
  process.stdout.write('@@e2b ' + JSON.stringify(obj) + '\n')
}

async function iteration() {
  const t0 = performance.now()
  const sbx = await Sandbox.create()
  const t1 = performance.now()
  let r
  try {
    r = await sbx.commands.run('echo hi')
  } catch (err) {
    await sbx.kill().catch(() => undefined)
    err.sandbox = sbx.sandboxId
    throw err
  }
  const t2 = performance.now()
  if (r.exitCode !== 0 || r.stdout !== 'hi\n') {
    await sbx.kill().catch(() => undefined)
    const err = new Error(`commands.run('echo hi'): exit ${r.exitCode}, stdout ${JSON.stringify(r.stdout)}, ` +
                          `stderr ${JSON.stringify(r.stderr)}`)
    err.sandbox = sbx.sandboxId
    throw err
  }
  const killed = await sbx.kill()
  const t3 = performance.now()
  if (killed === false) {
    const err = new Error(`sbx.kill() answered false (sandbox not found)`)
    err.sandbox = sbx.sandboxId
    throw err
  }
  return { create_ms: t1 - t0, cmd_ms: t2 - t1, kill_ms: t3 - t2, total_ms: t3 - t0 }
}

async function batch(n) {
  const out = []
  for (let i = 0; i < n; i++) out.push(await iteration())
  return out
}

async function main() {
  const argN = process.argv[2]
  if (argN !== undefined) {
    const n = Number(argN)
    if (!Number.isInteger(n) || n < 1) throw new Error(`usage: node e2b_loop.mjs [ITERATIONS]`)
    reply({ import_ms: importMs, iterations: await batch(n) })
    return
  }
  reply({ ready: true, import_ms: importMs, node: process.version })
  const rl = createInterface({ input: process.stdin, crlfDelay: Infinity })
  for await (const line of rl) {
    const [cmd, arg] = line.trim().split(/\s+/)
    if (cmd === 'quit') break
    if (cmd !== 'run') {
      reply({ error: `unknown command ${JSON.stringify(line)}` })
      continue
    }
    try {
      reply({ iterations: await batch(Number(arg ?? 1)) })
    } catch (err) {
      reply({ error: `${err?.constructor?.name ?? 'Error'}: ${err?.message ?? err}`, sandbox: err?.sandbox ?? null })
    }
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    reply({ error: `${err?.constructor?.name ?? 'Error'}: ${err?.message ?? err}`, sandbox: err?.sandbox ?? null })
    process.exit(1)
  },
)
