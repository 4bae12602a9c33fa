// Loaded into dynalite's process (node --require) by scripts/dynalite.sh.
// dynalite rethrows the error of a request its client aborted (a call cut
// by its context's deadline, as the tests' cut calls are), which ends the
// whole server; an aborted request must end only itself.
process.on('uncaughtException', (err) => {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('dynalite-guard: a client aborted its request:', err.message)
    return
  }
  console.error(err)
  process.exit(1)
})
