-- wrk script of python/tests/framework/run.py: one request, sent again and
-- again on every connection, and every response checked against the one
-- expected: its status and its whole body, byte for byte.
--
-- wrk ... -s check.lua URL -- METHOD BODY_FILE STATUS EXPECTED_FILE
--   METHOD         the request's method (GET, POST)
--   BODY_FILE      the file whose bytes are the request's body, or "-"
--   STATUS         the status every response must have
--   EXPECTED_FILE  the file whose bytes every response's body must be
--
-- done() prints one JSON line: the responses that matched ("ok"), those
-- that did not ("mismatch"), wrk's request count and its socket and
-- status errors, and the statuses seen ("statuses": status -> count).

local threads = {}

function setup(thread)
   table.insert(threads, thread)
end

local function slurp(path)
   local f = assert(io.open(path, "rb"))
   local data = f:read("*a")
   f:close()
   return data
end

function init(args)
   wrk.method = args[1]
   if args[2] ~= "-" then
      wrk.body = slurp(args[2])
      wrk.headers["Content-Type"] = "application/json"
   end
   want_status = tonumber(args[3])
   want_body = slurp(args[4])
   ok = 0
   mismatch = 0
   statuses = {}
end

function response(status, headers, body)
   statuses[status] = (statuses[status] or 0) + 1
   if status == want_status and body == want_body then
      ok = ok + 1
   else
      mismatch = mismatch + 1
   end
end

function done(summary, latency, requests)
   local good, bad, seen = 0, 0, {}
   for _, t in ipairs(threads) do
      good = good + t:get("ok")
      bad = bad + t:get("mismatch")
      for status, n in pairs(t:get("statuses")) do
         seen[status] = (seen[status] or 0) + n
      end
   end
   local parts = {}
   for status, n in pairs(seen) do
      table.insert(parts, string.format('"%d": %d', status, n))
   end
   local e = summary.errors
   io.write(string.format(
      '{"ok": %d, "mismatch": %d, "requests": %d, "errors": {"connect": %d, "read": %d, "write": %d, '
         .. '"status": %d, "timeout": %d}, "statuses": {%s}, "p99_us": %d, "seconds": %f}\n',
      good, bad, summary.requests, e.connect, e.read, e.write, e.status, e.timeout,
      table.concat(parts, ", "), latency:percentile(99), summary.duration / 1e6))
end
