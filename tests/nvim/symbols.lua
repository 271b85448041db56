-- Symbols guidance from headless Neovim (tests/editors/test_nvim.py): midword.lua as
-- users copy it, plus two stand-in language servers on the same buffer
-- (tests/nvim/symbols_server.py), a fast one and one slower than the time budget. It
-- asks midword's omnifunc for completions the way a user does (<C-x><C-o> in insert
-- mode) at three cursors, records every completion request each client puts on the
-- wire, and prints one JSON line.
--
-- nvim --headless -u NONE -i NONE -n -c "luafile tests/nvim/symbols.lua"
-- Environment: MIDWORD_ROOT, MIDWORD_PYTHON, MIDWORD_SYMBOLS ("auto" or "off").

local root = vim.env.MIDWORD_ROOT or vim.loop.cwd()
local python = vim.env.MIDWORD_PYTHON or "python3"
package.path = root .. "/tests/nvim/?.lua;" .. package.path
local support = require("script_support")
local ms, keys, wait_for = support.ms, support.keys, support.wait_for
local v = vim.version()
local out = { nvim = v.major .. "." .. v.minor .. "." .. v.patch, sent = {}, log = {}, cases = {} }

-- Every completion request a client sends, at the wire (client.request ends in
-- client.rpc.request), whoever makes it; `answered` once its answer was handled.
local function record(client)
  local request = client.rpc.request
  client.rpc.request = function(method, params, callback, ...)
    if method ~= "textDocument/completion" then
      return request(method, params, callback, ...)
    end
    local sent = {
      client = client.name,
      at_ms = ms(),
      position = params.position,
      candidates = params.midwordCandidates or vim.NIL,
      answered = false,
    }
    table.insert(out.sent, sent)
    return request(method, params, function(...)
      callback(...)
      sent.answered = true
    end, ...)
  end
end

local function main()
  local recorded = false
  local midword = require("midword").setup({
    cmd = { python, "-m", "midword", "serve" },
    filetypes = { "python" },
    root_dir = root,
    -- The small shipped model, so the made-up name's odds do not depend on what is installed.
    init_options = {
      model = root .. "/models/default",
      logLevel = "debug",
      debounceMs = 0,
      fim = "off", -- the odds below were measured on the plain prompt
      timeBudgetMs = 30000,
      maxTokens = 8,
    },
    handlers = {
      ["window/logMessage"] = function(_, result)
        table.insert(out.log, result and result.message or "")
      end,
    },
    on_attach = function(client)
      if not recorded then
        recorded = true
        record(client)
      end
    end,
    symbols = vim.env.MIDWORD_SYMBOLS or "auto",
    -- Generous: the stub answers within it even on a loaded CI machine. The slow stub is
    -- well past it.
    symbols_timeout_ms = 1500,
  })

  vim.cmd("enew")
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_name(bufnr, "/tmp/midword_nvim_symbols.py")
  vim.bo[bufnr].filetype = "python"

  local stubs = {}
  for _, spec in ipairs({
    { "stub", 0, { "zqxMember", "zqxMemo(x)=zqxMemo", "zqxOther", "zqx member" } },
    { "slow", 8000, { "zqxMemSlow" } },
  }) do
    local cmd = { python, root .. "/tests/nvim/symbols_server.py", "--delay-ms", tostring(spec[2]) }
    vim.list_extend(cmd, spec[3])
    local id = vim.lsp.start_client({
      name = spec[1], cmd = cmd, root_dir = root, on_init = record,
    })
    vim.lsp.buf_attach_client(bufnr, id)
    stubs[#stubs + 1] = id
  end

  vim.wait(240000, function()
    local s = midword.status()
    return s == "ready" or s == "error"
  end, 50)
  out.load_s = ms() / 1000
  vim.wait(60000, function()
    for _, id in ipairs(stubs) do
      local client = vim.lsp.get_client_by_id(id)
      if not (client and client.server_capabilities) then
        return false
      end
    end
    return true
  end, 50)
  out.status = midword.status()
  out.clients = {}
  local attached = vim.lsp.get_clients and vim.lsp.get_clients({ bufnr = bufnr })
    or vim.lsp.buf_get_clients(bufnr)
  for _, client in pairs(attached) do
    table.insert(out.clients, client.name)
  end

  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, {
    "import argparse",
    "",
    "",
    "class Obj:",
    "    def zqxMember(self):",
    "        return 1",
    "",
    "",
    "def main(argv):",
    "    obj = Obj()",
    "",
  })
  local cases = { { "in a name", "    value = obj.zqxMem" } }
  if vim.env.MIDWORD_SYMBOLS ~= "off" then
    table.insert(cases, { "after a dot", "    value = obj." })
    table.insert(cases, { "not at a name", "    value = " })
  end
  for _, case in ipairs(cases) do
    local name, text = case[1], case[2]
    vim.api.nvim_buf_set_lines(bufnr, 10, 11, false, { text })
    vim.api.nvim_win_set_cursor(0, { 11, 0 })
    local first = #out.sent + 1
    keys("A<C-x><C-o>") -- append at the end of the line, then ask the omnifunc
    wait_for(120000, function()
      for i = first, #out.sent do
        if out.sent[i].client == "midword" and out.sent[i].answered then
          return true
        end
      end
      return false
    end)
    local info = vim.fn.complete_info({ "items" })
    local words = {}
    for _, item in ipairs(info.items or {}) do
      table.insert(words, item.word)
    end
    out.cases[name] = {
      typed = text,
      line = vim.api.nvim_get_current_line(), -- complete() inserts the first item
      words = words,
      first = first, -- 1-based index of its first request in `sent`
    }
    keys("<Esc>")
    wait_for(5000, function()
      return vim.fn.mode() == "n"
    end)
  end
end

support.run(out, main)
