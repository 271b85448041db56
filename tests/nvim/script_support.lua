-- What the headless test scripts (symbols.lua, acceptance.lua) share: a clock, typed
-- keys, waiting for what the keys do, and the one JSON line a script prints at its end.
--
--   local support = require("script_support")
--   support.run(out, function() support.keys("ihello<Esc>"); support.wait_for(500, done) end)

local M = {}

local started = vim.loop.hrtime()
local co

--- Milliseconds since the script started.
function M.ms()
  return (vim.loop.hrtime() - started) / 1e6
end

--- Keys as if typed (termcodes such as <C-x> replaced).
function M.keys(text)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(text, true, false, true), "t", false)
end

--- Wait until cond() holds or limit_ms pass; returns cond(). Typed keys are read by the
--- main loop, which vim.wait does not run: the script is a coroutine that yields to it.
function M.wait_for(limit_ms, cond)
  local deadline = M.ms() + limit_ms
  local function poll()
    if cond() or M.ms() > deadline then
      assert(coroutine.resume(co))
    else
      vim.defer_fn(poll, 20)
    end
  end
  vim.defer_fn(poll, 20)
  coroutine.yield()
  return cond()
end

--- Run main() as the coroutine; then print `out` as one JSON line (with `error` when
--- main raised) and quit Neovim, exit status 3 after an error.
function M.run(out, main)
  co = coroutine.create(function()
    local ok, err = pcall(main)
    if not ok then
      out.error = tostring(err)
    end
    io.stdout:write(vim.fn.json_encode(out) .. "\n")
    io.stdout:flush()
    vim.cmd(ok and "qall!" or "cquit! 3")
  end)
  assert(coroutine.resume(co))
end

return M
