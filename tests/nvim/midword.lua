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
--
-- Symbols: with the cursor in a name, or just after `.`, `::` or `->`, the omnifunc first
-- asks the buffer's other language servers which names they offer there (for at most
-- `symbols_timeout_ms`) and passes them to midword, whose completion then starts with one
-- of them when the model gives them enough probability. `symbols = "off"` skips this. A
-- completion plugin makes the same request with require("midword").complete(handler).
--
-- Acceptance log (`midword stats`): the client asks the server to tag its items
-- (capability experimental.midword.completionEvents); the omnifunc reports the first item
-- it shows as midword/completionShown, and the item inserted when completion ends
-- (CompleteDone) as midword/completionAccepted. The server then follows that text
-- through later edits (retained characters). Items shown by a completion plugin are not
-- reported. The server's `acceptanceLog = false` turns the log off.
--
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
  omnifunc = true, -- set omnifunc so <C-x><C-o> asks midword (require("midword").omnifunc)
  symbols = "auto", -- "auto": pass the other language servers' names to midword; "off"
  symbols_timeout_ms = 200, -- how long to wait for those servers' answers
  symbols_max = 500, -- the most names passed on
}

local state = { status = { state = "stopped", message = "" }, client_id = nil, opts = M.defaults }

function M.status()
  return state.status.state, state.status.message
end

local function on_status(_, result)
  state.status = result or state.status
  if state.status.state == "error" then
    vim.notify("midword: " .. (state.status.message or "error"), vim.log.levels.ERROR)
  end
end

-- client:method(...) from Neovim 0.11 on (it deprecates the dot form), client.method(...) before.
local function call(client, method, ...)
  if vim.fn.has("nvim-0.11") == 1 then
    return client[method](client, ...)
  end
  return client[method](...)
end

-- The clients attached to a buffer (vim.lsp.get_clients is 0.10+).
local function clients_of(bufnr)
  if vim.lsp.get_clients then
    return vim.lsp.get_clients({ bufnr = bufnr })
  end
  return vim.tbl_values(vim.lsp.buf_get_clients(bufnr))
end

-- The midword client attached to a buffer, or nil.
local function midword_client(bufnr)
  for _, client in ipairs(clients_of(bufnr)) do
    if client.name == "midword" then
      return client
    end
  end
  return nil
end

-- The name typed before byte column `col` of `line`, and the column where it starts. Name
-- characters as the server counts them: ASCII letters, digits, `_`, and any non-ASCII
-- character (UTF-8 bytes 0x80 and up), so midword's edits start at that column.
local function typed_name(line, col)
  local typed = line:sub(1, col):match("[%w_\128-\255]*$")
  return typed, col - #typed
end

-- Whether the cursor is in a name or where a member's name starts. Anywhere else (a new
-- statement, an argument) the other servers offer every name in scope, which says
-- little about what comes next, and asking them would only cost time.
local function at_name(line, col)
  local typed, start = typed_name(line, col)
  if typed:match("^%d") then
    return false -- a number
  end
  local before = line:sub(1, start)
  return typed ~= "" or before:match("%.$") ~= nil or before:match("::$") ~= nil
    or before:match("%->$") ~= nil
end

-- Adds to `names` the names among a completion answer's filter texts, labels and insert
-- texts that go on from `typed`, each once, up to `max`. Text that is not a bare name
-- (`foo(int x)`, a snippet) is left out: midword scores names.
local function add_names(result, typed, names, seen, max)
  local items = type(result) == "table" and (result.items or result) or {}
  for _, item in ipairs(items) do
    local edit = type(item.textEdit) == "table" and item.textEdit.newText or nil
    local texts = { item.filterText, item.label, item.insertText, edit }
    for i = 1, 4 do
      local text = texts[i]
      if #names >= max then
        return
      end
      if type(text) == "string" and not seen[text] and text:sub(1, #typed) == typed
        and text:match("^[%a_\128-\255][%w_\128-\255]*$") then
        seen[text] = true
        names[#names + 1] = text
      end
    end
  end
end

-- Asks the current buffer's other language servers for completion items at the cursor
-- and calls `done(names)` once all have answered or `symbols_timeout_ms` has passed,
-- whichever is first; what comes later is dropped (and those requests cancelled).
function M.symbols(done)
  local opts, bufnr = state.opts, vim.api.nvim_get_current_buf()
  local typed = typed_name(vim.api.nvim_get_current_line(), vim.api.nvim_win_get_cursor(0)[2])
  local others, answers, pending, finished = {}, {}, {}, false
  for _, client in ipairs(clients_of(bufnr)) do
    local caps = client.server_capabilities
    if client.name ~= "midword" and caps and caps.completionProvider then
      others[#others + 1] = client
    end
  end
  local function finish()
    if finished then
      return
    end
    finished = true
    for client, id in pairs(pending) do
      call(client, "cancel_request", id)
    end
    local names, seen = {}, {}
    for i = 1, #others do
      add_names(answers[i], typed, names, seen, opts.symbols_max)
    end
    done(names)
  end
  for i, client in ipairs(others) do
    local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
    params.context = { triggerKind = 1 } -- Invoked
    local ok, id = call(client, "request", "textDocument/completion", params, function(err, result)
      pending[client] = nil
      answers[i] = not err and result or nil
      if next(pending) == nil then
        finish()
      end
    end, bufnr)
    if ok then
      pending[client] = id
    end
  end
  -- Answers come from the event loop, so none has arrived yet: all pending are counted.
  if next(pending) == nil then
    finish()
  else
    vim.defer_fn(finish, opts.symbols_timeout_ms)
  end
end

-- Asks midword for completion items at the cursor of the current window, with the other
-- servers' names as `midwordCandidates` where they apply (docs/editors.md); `handler` is
-- an LSP handler, function(err, result). False when midword is not attached.
function M.complete(handler)
  local bufnr = vim.api.nvim_get_current_buf()
  local client = midword_client(bufnr)
  if not client then
    return false
  end
  -- The position is taken now: the names are gathered at this cursor too.
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  local function send(names)
    params.midwordCandidates = #names > 0 and names or nil
    call(client, "request", "textDocument/completion", params, handler, bufnr)
  end
  local line, col = vim.api.nvim_get_current_line(), vim.api.nvim_win_get_cursor(0)[2]
  if state.opts.symbols == "off" or not at_name(line, col) then
    send({})
  else
    M.symbols(send)
  end
  return true
end

-- The acceptance log's tags of a midword item ({id, method, context}, sent as its `data`
-- when the client asked for them), or nil.
local function tags_of(data)
  if type(data) == "table" and type(data.id) == "string" and data.id ~= "" then
    return data
  end
  return nil
end

-- Tells midword about one of its items (midword/completionShown, .../completionAccepted).
local function report(bufnr, event, tags)
  local client = midword_client(bufnr)
  if client and tags then
    call(client, "notify", "midword/" .. event, { id = tags.id })
  end
end

-- CompleteDone: the item inserted when completion ended stays in the buffer (<C-y>, or
-- typing on), so it is accepted; after <C-e> v:completed_item is empty (0.7) or the
-- reason is "cancel" (0.10+). The item carries its tags in user_data (the omnifunc's).
local function on_complete_done(args)
  local event = vim.v.event
  if type(event) == "table" and event.reason == "cancel" then
    return
  end
  local item = vim.v.completed_item
  local data = type(item) == "table" and type(item.user_data) == "table" and item.user_data
  report(args.buf, "completionAccepted", data and tags_of(data.midword))
end

-- 'omnifunc'. Like vim.lsp.omnifunc it answers the first call with -2 (keep completing)
-- and fills the menu with complete() when the answer comes, so typing never waits on
-- the model; an answer for a buffer or cursor that has changed meanwhile is dropped.
function M.omnifunc(findstart, _)
  if findstart == 0 then
    return {} -- not called: the first call never returns a column
  end
  local bufnr, cursor = vim.api.nvim_get_current_buf(), vim.api.nvim_win_get_cursor(0)
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local _, start = typed_name(vim.api.nvim_get_current_line(), cursor[2])
  local asked = M.complete(function(err, result)
    local now = vim.api.nvim_win_get_cursor(0)
    if err or type(result) ~= "table" or vim.fn.mode() ~= "i"
      or vim.api.nvim_get_current_buf() ~= bufnr
      or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick
      or now[1] ~= cursor[1] or now[2] ~= cursor[2] then
      return
    end
    local words = {}
    for _, item in ipairs(result.items or result) do
      -- midword's edits replace the name typed so far, from `start` to the cursor
      local edit = type(item.textEdit) == "table" and item.textEdit.newText or nil
      words[#words + 1] = {
        word = edit or item.insertText or item.label,
        abbr = item.label,
        menu = item.detail,
        icase = 1,
        dup = 1,
        -- read back from v:completed_item on CompleteDone (user_data may be a table)
        user_data = tags_of(item.data) and { midword = item.data } or nil,
      }
    end
    vim.fn.complete(start + 1, words)
    -- One report per menu, for the first item (the one complete() inserts), as VS Code
    -- reports the one inline item it shows; a later item picked still counts as shown.
    if words[1] and words[1].user_data then
      report(bufnr, "completionShown", words[1].user_data.midword)
    end
  end)
  return asked and -2 or -3
end

function M.setup(opts)
  opts = vim.tbl_extend("force", M.defaults, opts or {})
  if opts.symbols ~= "auto" and opts.symbols ~= "off" then
    vim.notify('midword: symbols must be "auto" or "off"; using "auto"', vim.log.levels.WARN)
    opts.symbols = "auto"
  end
  state.opts = opts
  local config = {
    name = "midword",
    cmd = opts.cmd,
    root_dir = opts.root_dir or vim.loop.cwd(),
    init_options = opts.init_options,
    -- Neovim 0.7 takes these instead of its defaults: the defaults, plus the ask for tags
    capabilities = vim.tbl_deep_extend("force", vim.lsp.protocol.make_client_capabilities(), {
      experimental = { midword = { completionEvents = true } },
    }),
    handlers = vim.tbl_extend("force", { ["midword/status"] = on_status }, opts.handlers),
    on_attach = function(client, bufnr)
      if opts.omnifunc then
        vim.bo[bufnr].omnifunc = "v:lua.require'midword'.omnifunc"
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
  vim.api.nvim_create_autocmd("CompleteDone", { group = group, callback = on_complete_done })
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
