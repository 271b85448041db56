-- Drives `midword serve` from headless Neovim through the documented config
-- (tests/nvim/midword.lua): types into a buffer, so that Neovim sends real
-- incremental didChange, then asks for a completion list and an inline completion
-- mid-identifier, and prints one JSON line for tests/editors/test_nvim.py.
--
-- nvim --headless -u NONE -i NONE -n -c "luafile tests/nvim/client.lua"
-- Environment: MIDWORD_ROOT (repository), MIDWORD_PYTHON (interpreter).

local root = vim.env.MIDWORD_ROOT or vim.loop.cwd()
package.path = root .. "/tests/nvim/?.lua;" .. package.path
local out = { nvim = tostring(vim.version().major) .. "." .. vim.version().minor .. "." .. vim.version().patch }

local function finish(code)
  io.stdout:write(vim.fn.json_encode(out) .. "\n")
  io.stdout:flush()
  vim.cmd(code == 0 and "qall!" or "cquit! " .. code)
end

local ok, err = pcall(function()
  local midword = require("midword").setup({
    cmd = { vim.env.MIDWORD_PYTHON or "python3", "-m", "midword", "serve" },
    filetypes = { "python" },
    root_dir = root,
    init_options = { timeBudgetMs = 30000, maxTokens = 16, maxItems = 2 },
  })

  vim.cmd("enew")
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_name(bufnr, "/tmp/midword_nvim_test.py")
  vim.bo[bufnr].filetype = "python" -- FileType -> the snippet's autocmd attaches midword
  local started = vim.loop.hrtime()
  vim.wait(240000, function()
    local s = midword.status()
    return s == "ready" or s == "error"
  end, 50)
  out.status = midword.status()
  out.load_s = (vim.loop.hrtime() - started) / 1e9
  out.attached = #vim.lsp.buf_get_clients(bufnr)

  -- Type like a user: whole lines first, then the last line character by character.
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, { "import argparse", "", "", "def main(argv):", "" })
  local line = "    parser = argparse.ArgumentPar"
  for i = 1, #line do
    vim.api.nvim_buf_set_text(bufnr, 4, i - 1, 4, i - 1, { line:sub(i, i) })
  end
  vim.o.virtualedit = "onemore" -- the cursor after the last character, as in insert mode
  vim.api.nvim_win_set_cursor(0, { 5, #line }) -- (1-based row, 0-based byte column)
  out.line = line

  local params = vim.lsp.util.make_position_params()
  out.position = params.position
  local responses = vim.lsp.buf_request_sync(bufnr, "textDocument/completion", params, 60000)
  local _, completion = next(responses or {})
  out.completion = completion and (completion.result or { error = completion.err }) or vim.NIL

  -- Neovim 0.7 does not know textDocument/inlineCompletion; the request goes out as is.
  params.context = { triggerKind = 1 }
  responses = vim.lsp.buf_request_sync(bufnr, "textDocument/inlineCompletion", params, 60000)
  local _, inline = next(responses or {})
  out.inline = inline and (inline.result or { error = inline.err }) or vim.NIL

  -- What the server holds for this buffer: its live VCT's prompt.
  responses = vim.lsp.buf_request_sync(
    bufnr, "midword/inspect", { textDocument = params.textDocument }, 60000
  )
  local _, inspect = next(responses or {})
  out.inspect = inspect and inspect.result and {
    prefix = inspect.result.prefix, version = inspect.result.version,
  } or vim.NIL

  -- Accept the first item the way a completion plugin does: apply its text edit.
  local first = type(out.completion) == "table" and out.completion.items and out.completion.items[1]
  if first and first.textEdit then
    vim.lsp.util.apply_text_edits({ first.textEdit }, bufnr, "utf-16")
    out.accepted = vim.api.nvim_buf_get_lines(bufnr, 4, 5, false)[1]
  end
end)

if not ok then
  out.error = tostring(err)
  finish(3)
else
  finish(0)
end
