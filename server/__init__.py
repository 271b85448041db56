"""midword's language server (pygls): a live covering tree and KV cache per open buffer,
kept in step with every edit, answering ``textDocument/inlineCompletion`` (and plain
``textDocument/completion`` for older clients) over stdio or TCP.

Start it with ``midword serve`` (``midword.server.server.serve``). Handlers in
:mod:`.server` only convert LSP types; :mod:`.controller` holds the behaviour,
:mod:`.worker` runs every model call on one thread, :mod:`.loading` loads the model.
The server imports the engine through its face (``midword.engine``) and, from the
``midword`` package, only the version and :mod:`midword.models` (where models are found);
never the command line. It writes nothing to stdout but the protocol.
"""
