-- The acceptance log from headless Neovim (tests/editors/test_nvim.py): midword.lua as
-- users copy it asks for tagged items, the omnifunc (<C-x><C-o> in insert mode) shows
-- midword's items mid-identifier, <C-y> accepts the first, a backspace takes back its
-- last character and "()" is typed after it. The script waits until the server has
-- logged a `retained` checkpoint for the item, then prints one JSON line; the test reads
-- the log itself.
--
-- nvim --headless -u NONE -i NONE -n -c "luafile tests/nvim/acceptance.lua"
-- Environment: MIDWORD_ROOT, MIDWORD_PYTHON, MIDWORD_ACCEPTANCE_LOG (the log the server
-- writes) and MIDWORD_RETENTION_CHECKPOINTS (short checkpoints), both read by the server.

local root = vim.env.MIDWORD_ROOT or vim.loop.cwd()
local python = vim.env.MIDWORD_PYTHON or "python3"
local log_path = assert(vim.env.MIDWORD_ACCEPTANCE_LOG, "MIDWORD_ACCEPTANCE_LOG is not set")
package.path = root .. "/tests/nvim/?.lua;" .. package.path
local support = require("script_support")
local ms, keys, wait_for = support.ms, support.keys, support.wait_for
local v = vim.version()
local out = { nvim = v.major .. "." .. v.minor .. "." .. v.patch, done = {} }

local function log_has(event)
  local f = io.open(log_path, "r")
  if not f then
    return false
  end
  local text = f:read("*a")
  f:close()
  return text:find('"event":"' .. event .. '"', 1, true) ~= nil
end

local function main()
  local midword = require("midword").setup({
    cmd = { python, "-m", "midword", "serve" },
    filetypes = { "python" },
    root_dir = root,
    -- The small shipped model, so the completed name does not depend on what is installed.
    init_options = { model = root .. "/models/default", debounceMs = 0, timeBudgetMs = 30000, maxTokens = 8 },
  })
  -- What CompleteDone saw (midword.lua's own autocmd reports it to the server).
  vim.api.nvim_create_autocmd("CompleteDone", {
    callback = function()
      local item = vim.v.completed_item
      table.insert(out.done, { word = item.word or vim.NIL, user_data = item.user_data or vim.NIL })
    end,
  })

  vim.cmd("enew")
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_name(bufnr, "/tmp/midword_nvim_acceptance.py")
  vim.bo[bufnr].filetype = "python"
  vim.wait(240000, function()
    local s = midword.status()
    return s == "ready" or s == "error"
  end, 50)
  out.status = midword.status()
  out.load_s = ms() / 1000

  local typed = "    parser = argparse.ArgumentPar"
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, false, { "import argparse", "", "", "def main(argv):", typed })
  vim.api.nvim_win_set_cursor(0, { 5, 0 })
  out.typed = typed
  keys("A<C-x><C-o>") -- append at the end of the line, then ask the omnifunc
  wait_for(120000, function()
    return vim.fn.pumvisible() == 1
  end)
  local words = {}
  for _, item in ipairs(vim.fn.complete_info({ "items" }).items or {}) do
    table.insert(words, item.word)
  end
  out.words = words
  keys("<C-y>") -- accept the first item (complete() has inserted it already)
  wait_for(5000, function()
    return vim.fn.pumvisible() == 0
  end)
  out.accepted_line = vim.api.nvim_get_current_line()
  keys("<BS>()<Esc>") -- take back its last character, then type after it
  wait_for(5000, function()
    return vim.fn.mode() == "n"
  end)
  out.line = vim.api.nvim_get_current_line()
  out.retained = wait_for(30000, function()
    return log_has("retained")
  end)
end

support.run(out, main)
