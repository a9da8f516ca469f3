// shop: the demo workload, a tiny fake online shop that serves "requests" on
// worker threads for a fixed time, with lock contention, allocation churn, a
// deliberate leak and a CPU hot spot.
//
// usage: shop [--seconds S] [--threads T] [--wait]
//   --seconds S  how long to serve requests, may be fractional (default 2)
//   --threads T  worker threads (default 4)
//   --wait       print `READY <pid>`, then block until SIGUSR1 arrives
//
// Call tree (every named function is noinline):
//   main -> run_shop -> T threads: shop::Server::worker_loop, until the
//   deadline, -> shop::Server::handle_request(r) for request r = 0, 1, 2, ...:
//     shop::Session::open(r)       operator new(2048) for a shop::Session
//     1 + r % 3 items, each:
//       shop::Catalog::lookup(id)  locks the one catalog std::mutex shared by
//                                  all workers, binary search, unlock; every
//                                  50th lookup overall instead calls
//         shop::Catalog::slow_lookup(id)  with the lock held, busy-waits
//                                  ~1 ms: this is where the contention is
//       shop::Cart::add_item(...)  std::vector<Item> / std::string growth plus
//                                  a 4-64 KiB std::vector<char> payload
//     shop::Pricing::compute(cart) ~20 us of pure CPU (no calls)
//     shop::Session::close(s)      operator delete, except when r % 100 == 99:
//                                  that session is leaked (never freed)
//   Carts are freed at the end of each request.
//
// Last line on stdout (one line; shown wrapped here):
// EXPECT {"program":"shop","pid":P,"threads":T,"seconds":S,"requests":n,
//   "lookups":l,"slow_lookups":s,"slow_every":50,"slow_hold_us":1000,
//   "items_added":i,"item_bytes":b,"pricing_calls":n,"sessions_opened":n,
//   "leaked_sessions":k,"leaked_bytes":2048*k,"session_size":2048,
//   "leak_every":100,"catalog_mutex":"0x..."}
// where every count is measured by the program over the whole run: requests
// handled; Catalog::lookup calls (== items_added); Catalog::slow_lookup calls
// (== lookups / 50, rounded down); Cart::add_item calls and their total
// payload bytes; Pricing::compute calls (== requests); sessions opened (==
// requests); leaked sessions (requests r with r % 100 == 99) and their bytes;
// catalog_mutex is the runtime address of the shared std::mutex.

#include <atomic>
#include <mutex>
#include <thread>

#include "common.h"

namespace shop {

constexpr uint64_t kProducts = 1024;
constexpr uint64_t kSlowEvery = 50;
constexpr int64_t kSlowHoldUs = 1000;
constexpr uint64_t kLeakEvery = 100;
constexpr size_t kMinPayload = 4 * 1024, kMaxPayload = 64 * 1024;
constexpr int kPricingRounds = 8600;

inline uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

struct WorkerStats {
  int64_t requests = 0;
  int64_t items_added = 0;
  int64_t item_bytes = 0;
  int64_t pricing_calls = 0;
  int64_t sessions_opened = 0;
  int64_t leaked_sessions = 0;
};

struct Product {
  uint64_t id;
  uint64_t price_cents;
};

class Catalog {
 public:
  Catalog() {
    products_.reserve(kProducts);
    for (uint64_t i = 0; i < kProducts; i++) products_.push_back({i * 3 + 1, 100 + mix(i) % 10000});
  }
  EBT_NOINLINE uint64_t lookup(uint64_t id);
  EBT_NOINLINE uint64_t slow_lookup(uint64_t id);

  std::mutex mu;
  uint64_t lookups = 0, slow_lookups = 0;  // guarded by mu

 private:
  std::vector<Product> products_;
};

uint64_t Catalog::lookup(uint64_t id) {
  std::lock_guard<std::mutex> lk(mu);
  lookups += 1;
  if (lookups % kSlowEvery == 0) return slow_lookup(id);
  size_t lo = 0, hi = products_.size();
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (products_[mid].id < id) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo < products_.size() && products_[lo].id == id ? products_[lo].price_cents : 0;
}

// The "cache refresh" path: called with `mu` held, keeps it ~1 ms.
uint64_t Catalog::slow_lookup(uint64_t id) {
  slow_lookups += 1;
  ebt::spin_for_us(kSlowHoldUs);
  for (const Product& p : products_) {
    if (p.id == id) return p.price_cents;
  }
  return 0;
}

struct Item {
  uint64_t product;
  uint64_t price_cents;
  std::vector<char> payload;
};

class Cart {
 public:
  EBT_NOINLINE void add_item(uint64_t product, uint64_t price_cents, size_t payload_bytes);
  const std::vector<Item>& items() const { return items_; }

 private:
  std::vector<Item> items_;
  std::string receipt_;
};

void Cart::add_item(uint64_t product, uint64_t price_cents, size_t payload_bytes) {
  items_.push_back(Item{product, price_cents, std::vector<char>(payload_bytes, char(product))});
  receipt_ += "sku-";
  receipt_ += std::to_string(product);
  receipt_ += " x1 @ ";
  receipt_ += std::to_string(price_cents);
  receipt_ += " cents; ";
  ebt::escape(receipt_.data());
}

class Pricing {
 public:
  EBT_NOINLINE static uint64_t compute(const Cart& cart);
};

uint64_t Pricing::compute(const Cart& cart) {
  uint64_t total = 0;
  for (const Item& item : cart.items()) {
    // A dependent multiply chain: pure CPU, no calls, ~20 us per request
    // in total whatever the number of items.
    uint64_t x = item.price_cents ^ item.product;
    const int rounds = int(kPricingRounds / cart.items().size());
    for (int r = 0; r < rounds; r++) {
      x = x * 6364136223846793005ULL + 1442695040888963407ULL;
      x ^= x >> 29;
    }
    total += item.price_cents + (x & 1);
  }
  return total;
}

struct Session {
  EBT_NOINLINE static Session* open(uint64_t request);
  EBT_NOINLINE static void close(Session* s);

  uint64_t request;
  uint64_t user;
  char scratch[2048 - 16];
};
static_assert(sizeof(Session) == 2048, "the EXPECT line promises 2048-byte sessions");

Session* Session::open(uint64_t request) {
  Session* s = new Session;
  s->request = request;
  s->user = mix(request) % 1000;
  s->scratch[0] = 0;
  ebt::escape(s);
  return s;
}

void Session::close(Session* s) {
  delete s;
  ebt::no_tail_call();
}

class Server {
 public:
  EBT_NOINLINE void handle_request(uint64_t request, WorkerStats& st);
  EBT_NOINLINE void worker_loop(int64_t deadline_ns, WorkerStats* st);

  Catalog catalog;
  std::atomic<uint64_t> next_request{0};
};

void Server::handle_request(uint64_t request, WorkerStats& st) {
  Session* session = Session::open(request);
  st.sessions_opened += 1;
  Cart cart;
  const int items = 1 + int(request % 3);
  for (int i = 0; i < items; i++) {
    const uint64_t product = (mix(request * 4 + i) % kProducts) * 3 + 1;
    const uint64_t price = catalog.lookup(product);
    const size_t payload = kMinPayload + mix(request ^ (uint64_t(i) << 40)) % (kMaxPayload - kMinPayload + 1);
    cart.add_item(product, price, payload);
    st.items_added += 1;
    st.item_bytes += int64_t(payload);
  }
  const uint64_t total = Pricing::compute(cart);
  st.pricing_calls += 1;
  ebt::escape(&total);
  if (request % kLeakEvery == kLeakEvery - 1) {
    // The deliberate bug: this path forgets to close the session.
    st.leaked_sessions += 1;
  } else {
    Session::close(session);
  }
  st.requests += 1;
}

void Server::worker_loop(int64_t deadline_ns, WorkerStats* st) {
  while (ebt::now_ns() < deadline_ns) {
    handle_request(next_request.fetch_add(1, std::memory_order_relaxed), *st);
  }
  ebt::no_tail_call();
}

}  // namespace shop

EBT_NOINLINE void run_shop(double seconds, int64_t threads) {
  shop::Server server;
  std::vector<shop::WorkerStats> stats(threads);
  std::vector<std::thread> workers;
  workers.reserve(threads);
  const int64_t deadline = ebt::now_ns() + int64_t(seconds * 1e9);
  for (int64_t t = 0; t < threads; t++) {
    workers.emplace_back(&shop::Server::worker_loop, &server, deadline, &stats[t]);
  }
  for (auto& w : workers) w.join();

  shop::WorkerStats sum;
  for (const auto& s : stats) {
    sum.requests += s.requests;
    sum.items_added += s.items_added;
    sum.item_bytes += s.item_bytes;
    sum.pricing_calls += s.pricing_calls;
    sum.sessions_opened += s.sessions_opened;
    sum.leaked_sessions += s.leaked_sessions;
  }
  ebt::Json j;
  j.begin_object()
      .str("program", "shop")
      .num("pid", getpid())
      .num("threads", threads)
      .real("seconds", seconds)
      .num("requests", sum.requests)
      .num("lookups", int64_t(server.catalog.lookups))
      .num("slow_lookups", int64_t(server.catalog.slow_lookups))
      .num("slow_every", int64_t(shop::kSlowEvery))
      .num("slow_hold_us", shop::kSlowHoldUs)
      .num("items_added", sum.items_added)
      .num("item_bytes", sum.item_bytes)
      .num("pricing_calls", sum.pricing_calls)
      .num("sessions_opened", sum.sessions_opened)
      .num("leaked_sessions", sum.leaked_sessions)
      .num("leaked_bytes", sum.leaked_sessions * int64_t(sizeof(shop::Session)))
      .num("session_size", int64_t(sizeof(shop::Session)))
      .num("leak_every", int64_t(shop::kLeakEvery))
      .hex("catalog_mutex", &server.catalog.mu)
      .end_object();
  j.print_expect();
}

int main(int argc, char** argv) {
  const char* usage = "shop [--seconds S] [--threads T] [--wait]";
  double seconds = 2;
  int64_t threads = 4;
  bool wait = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--seconds") == 0) {
      seconds = ebt::arg_f64(argc, argv, &i, usage);
    } else if (strcmp(argv[i], "--threads") == 0) {
      threads = int64_t(ebt::arg_u64(argc, argv, &i, usage));
    } else if (strcmp(argv[i], "--wait") == 0) {
      wait = true;
    } else {
      ebt::usage_error(usage, "unknown argument", argv[i]);
    }
  }
  if (threads < 1 || threads > 1024) ebt::usage_error(usage, "--threads must be 1..1024", nullptr);
  if (seconds > 3600) ebt::usage_error(usage, "--seconds must be at most 3600", nullptr);
  if (wait) ebt::wait_for_sigusr1();
  run_shop(seconds, threads);
  return 0;
}
