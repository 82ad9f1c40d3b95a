-- wrk script for POST /api/sites/{siteId}/conversions (used by scripts/bench.sh).
--
-- Environment:
--   BENCH_SITE  site id          BENCH_KEY  API key          BENCH_IDS  identifier file (seed.rs --ids)
--   BENCH_RUN   a tag unique to this run, so orderIds never repeat across runs on one database
--   BENCH_MODE  "unique" (default): every request a new orderId;
--               "dup": both wrk threads send the same orderId sequence, so every order is sent
--               twice, often concurrently (half the requests are repeats).
--
-- Every request names a real identifier (a clientId, visitorId or sessionId that resolves to a
-- session in the window). At the end it prints one line:
--   BENCH requests=N duration_us=N accepted=N non2xx=N sent=N errors=N p50_us=N p99_us=N ...
-- where accepted counts 202s and non2xx the answers outside 200..299, both as seen by wrk.

local site = os.getenv("BENCH_SITE") or error("BENCH_SITE not set")
local key = os.getenv("BENCH_KEY") or error("BENCH_KEY not set")
local ids_path = os.getenv("BENCH_IDS") or error("BENCH_IDS not set")
local run = os.getenv("BENCH_RUN") or tostring(os.time())
local mode = os.getenv("BENCH_MODE") or "unique"

local path = "/api/sites/" .. site .. "/conversions"
local headers = {
   ["Authorization"] = "Bearer " .. key,
   ["Content-Type"] = "application/json",
}

local threads = {}
local next_tid = 1

function setup(thread)
   thread:set("tid", next_tid)
   next_tid = next_tid + 1
   table.insert(threads, thread)
end

-- Per-thread state (globals, so that done() can read them with thread:get).
sent = 0
accepted = 0
non2xx = 0
local by_field = { clientId = {}, visitorId = {}, sessionId = {} }
local currencies = { "EUR", "EUR", "USD", "GBP", "CHF" }

function init(args)
   for line in io.lines(ids_path) do
      local field, value = line:match("^(%a+) (.+)$")
      if field and by_field[field] then
         table.insert(by_field[field], value)
      end
   end
   for f, list in pairs(by_field) do
      if #list == 0 then error("no " .. f .. " in " .. ids_path) end
   end
   math.randomseed(tid * 7919 + os.time())
end

local function identifier()
   local r = math.random(100)
   local field = (r <= 50 and "clientId") or (r <= 90 and "visitorId") or "sessionId"
   local list = by_field[field]
   return field, list[math.random(#list)]
end

function request()
   sent = sent + 1
   local order
   if mode == "dup" then
      order = run .. "-d-" .. sent
   else
      order = run .. "-" .. tid .. "-" .. sent
   end
   local field, value = identifier()
   local body = string.format(
      '{"%s":"%s","orderId":"%s","type":"purchase","value":%d.%02d,"currency":"%s"}',
      field, value, order, math.random(5, 400), math.random(0, 99),
      currencies[math.random(#currencies)])
   return wrk.format("POST", path, headers, body)
end

function response(status, headers, body)
   if status == 202 then
      accepted = accepted + 1
   elseif status < 200 or status > 299 then
      non2xx = non2xx + 1
      if non2xx <= 3 then
         io.stderr:write("non-2xx " .. status .. ": " .. tostring(body) .. "\n")
      end
   end
end

function done(summary, latency, requests)
   local a, n, s, maxsent = 0, 0, 0, 0
   for _, t in ipairs(threads) do
      a = a + t:get("accepted")
      n = n + t:get("non2xx")
      local ts = t:get("sent")
      s = s + ts
      if ts > maxsent then maxsent = ts end
   end
   local e = summary.errors
   io.write(string.format(
      "BENCH requests=%d duration_us=%d accepted=%d non2xx=%d sent=%d maxsent=%d errors=%d "
         .. "connect=%d read=%d write=%d status=%d timeout=%d p50_us=%d p90_us=%d p99_us=%d max_us=%d\n",
      summary.requests, summary.duration, a, n, s, maxsent,
      e.connect + e.read + e.write + e.status + e.timeout,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
