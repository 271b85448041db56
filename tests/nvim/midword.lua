-- midword for Neovim 0.7 and later: exact byte-level code completion over LSP.
--
-- Copy this file to ~/.config/nvim/lua/midword.lua and add to init.lua:
--
--   require("midword").setup({
--     filetypes = { "python", "lua", "rust" },        -- default: every file type
--     init_options = { maxTokens = 32, temperature = 0 }, -- see docs/editors.md
--   })
--
-- Where midword completes is a server option as well, e.g.
--   init_options = { languages = { gitcommit = false, text = false },
--                    excludeFiles = { ".env", ".env.*", "*.pem", "*.key" } }
-- (prose and secret files are left out by default: docs/editors.md).
--
-- Neovim up to 0.11 has no inline (ghost text) completion, so midword serves it as
-- completion items (<C-x><C-o> with omnifunc, or any completion plugin): the first
-- item completes the identifier under the cursor, the second the rest of the line.
-- `require("midword").status()` gives the model state ("loading", "ready", "error")
-- for a status line. tests/editors/test_nvim.py runs this file as it is.

local M = {}

M.defaults = {
  cmd = { "python3", "-m", "midword", "serve" },
  filetypes = nil, -- nil: every buffer that has a file type
  init_options = {}, -- midword's options (initializationOptions)
  root_dir = nil, -- nil: the current directory
  on_attach = nil, -- function(client, bufnr), called for each buffer
  handlers = {}, -- extra LSP handlers
  omnifunc = true, -- set omnifunc so <C-x><C-o> asks midword
}

local state = { status = { state = "stopped", message = "" }, client_id = nil }

function M.status()
  return state.status.state, state.status.message
end

local function on_status(_, result)
  state.status = result or state.status
  if state.status.state == "error" then
    vim.notify("midword: " .. (state.status.message or "error"), vim.log.levels.ERROR)
  end
end

function M.setup(opts)
  opts = vim.tbl_extend("force", M.defaults, opts or {})
  local config = {
    name = "midword",
    cmd = opts.cmd,
    root_dir = opts.root_dir or vim.loop.cwd(),
    init_options = opts.init_options,
    handlers = vim.tbl_extend("force", { ["midword/status"] = on_status }, opts.handlers),
    on_attach = function(client, bufnr)
      if opts.omnifunc then
        vim.api.nvim_buf_set_option(bufnr, "omnifunc", "v:lua.vim.lsp.omnifunc")
      end
      if opts.on_attach then
        opts.on_attach(client, bufnr)
      end
    end,
  }

  -- Attach a buffer: vim.lsp.start where it exists (0.8+), else one shared client.
  function M.attach(bufnr)
    bufnr = bufnr or vim.api.nvim_get_current_buf()
    if vim.lsp.start then
      state.client_id = vim.lsp.start(config, { bufnr = bufnr })
      return state.client_id
    end
    if state.client_id == nil or vim.lsp.get_client_by_id(state.client_id) == nil then
      state.status = { state = "loading", message = "starting" }
      state.client_id = vim.lsp.start_client(config)
    end
    if state.client_id then
      vim.lsp.buf_attach_client(bufnr, state.client_id)
    end
    return state.client_id
  end

  local group = vim.api.nvim_create_augroup("midword", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = opts.filetypes or "*",
    callback = function(args)
      M.attach(args.buf)
    end,
  })
  return M
end

return M
