//===- RedisStore.cpp - Blobs in Redis, through hiredis ---------*- C++ -*-===//
//
// hiredis is opened with dlopen at the first use of a Redis store, under the
// soname of the headers this was compiled with (the layout of its structs
// changed between 0.14 and 1.x): binaries that never touch Redis (the GPU
// bundle's runner, say) start on machines without libhiredis, and one that
// does gets a message naming the missing library.
//
// Commands are single-key (STRLEN, GET, SET), so a Redis Cluster works by
// following MOVED and ASK redirections to the node that owns the key's slot.
//
//===----------------------------------------------------------------------===//

#include "runtime/store/BlockStore.h"

#include "runtime/core/Support.h"

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#if __has_include(<hiredis/hiredis.h>)
#include <dlfcn.h>
#include <hiredis/hiredis.h>
#define KVIR_HAVE_HIREDIS 1
#endif

using namespace kvir::store;
using kvrt::str;

namespace {

/// The parts of a redis:// URL.
struct RedisAddress {
  std::string host = "127.0.0.1";
  int port = 6379;
  int db = 0;
  std::string user, password;
};

bool parseInt(const std::string &text, long min, long max, long &out) {
  if (text.empty() || text.size() > 10)
    return false;
  for (char c : text)
    if (c < '0' || c > '9')
      return false;
  out = std::strtol(text.c_str(), nullptr, 10);
  return out >= min && out <= max;
}

/// Parses `redis://[[user]:password@]host[:port][/db]`.
bool parseRedisUrl(const std::string &url, RedisAddress &out,
                   std::string &error) {
  const std::string scheme = "redis://";
  if (url.compare(0, scheme.size(), scheme) != 0) {
    error = str("'", url, "' is not a redis:// URL");
    return false;
  }
  std::string rest = url.substr(scheme.size());
  if (size_t at = rest.rfind('@'); at != std::string::npos) {
    std::string userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    size_t colon = userinfo.find(':');
    if (colon == std::string::npos) {
      out.password = userinfo;
    } else {
      out.user = userinfo.substr(0, colon);
      out.password = userinfo.substr(colon + 1);
    }
  }
  if (size_t slash = rest.find('/'); slash != std::string::npos) {
    long db;
    std::string text = rest.substr(slash + 1);
    rest = rest.substr(0, slash);
    if (!text.empty()) {
      if (!parseInt(text, 0, 1 << 20, db)) {
        error = str("'", url, "': the database '", text,
                    "' is not a non-negative number");
        return false;
      }
      out.db = int(db);
    }
  }
  std::string hostPort = rest;
  size_t colon = std::string::npos;
  if (!hostPort.empty() && hostPort[0] == '[') {
    size_t close = hostPort.find(']');
    if (close == std::string::npos) {
      error = str("'", url, "': an unterminated [IPv6 address]");
      return false;
    }
    out.host = hostPort.substr(1, close - 1);
    if (close + 1 < hostPort.size()) {
      if (hostPort[close + 1] != ':') {
        error = str("'", url, "': junk after the [IPv6 address]");
        return false;
      }
      colon = close + 1;
    }
  } else {
    colon = hostPort.rfind(':');
    out.host = hostPort.substr(0, colon);
  }
  if (colon != std::string::npos) {
    long port;
    std::string text = hostPort.substr(colon + 1);
    if (!parseInt(text, 1, 65535, port)) {
      error = str("'", url, "': the port '", text,
                  "' is not a number in [1, 65535]");
      return false;
    }
    out.port = int(port);
  }
  if (out.host.empty()) {
    error = str("'", url, "' names no host");
    return false;
  }
  return true;
}

#ifdef KVIR_HAVE_HIREDIS

#define KVIR_STRINGIFY2(x) #x
#define KVIR_STRINGIFY(x) KVIR_STRINGIFY2(x)
constexpr const char *kHiredisLibrary =
    "libhiredis.so." KVIR_STRINGIFY(HIREDIS_SONAME);

/// The hiredis functions the store calls, opened once.
struct Hiredis {
  decltype(&redisConnectWithTimeout) connectWithTimeout = nullptr;
  decltype(&redisSetTimeout) setTimeout = nullptr;
  decltype(&redisCommandArgv) commandArgv = nullptr;
  decltype(&freeReplyObject) freeReply = nullptr;
  decltype(&redisFree) free = nullptr;
  std::string error;

  static const Hiredis &get() {
    static const Hiredis api = open();
    return api;
  }

private:
  static Hiredis open() {
    Hiredis api;
    void *lib = dlopen(kHiredisLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char *why = dlerror();
      api.error = str("cannot load ", kHiredisLibrary, " (", why ? why : "",
                      "): install hiredis (Debian: libhiredis",
                      KVIR_STRINGIFY(HIREDIS_SONAME), ")");
      return api;
    }
    bool ok = true;
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(
          dlsym(lib, name));
      ok = ok && fn;
    };
    sym(api.connectWithTimeout, "redisConnectWithTimeout");
    sym(api.setTimeout, "redisSetTimeout");
    sym(api.commandArgv, "redisCommandArgv");
    sym(api.freeReply, "freeReplyObject");
    sym(api.free, "redisFree");
    if (!ok)
      api.error = str(kHiredisLibrary, " lacks a function the store calls");
    return api;
  }
};

timeval toTimeval(int32_t ms) {
  timeval tv;
  tv.tv_sec = ms / 1000;
  tv.tv_usec = (ms % 1000) * 1000;
  return tv;
}

/// A reply that frees itself.
struct Reply {
  redisReply *reply = nullptr;
  Reply() = default;
  Reply(const Reply &) = delete;
  Reply &operator=(const Reply &) = delete;
  ~Reply() {
    if (reply)
      Hiredis::get().freeReply(reply);
  }
};

class RedisStore final : public BlockStore {
public:
  RedisStore(std::string url, RedisAddress address,
             const kvrt_block_store_options &options)
      : urlText(std::move(url)), address(std::move(address)), options(options) {
  }
  ~RedisStore() override {
    for (auto &[node, ctx] : connections)
      if (ctx)
        Hiredis::get().free(ctx);
  }

  std::string url() const override { return urlText; }

  StoreStatus lookup(const std::string &key, int64_t &size) override {
    size = 0;
    Reply reply;
    StoreStatus status = command({"STRLEN", key}, reply);
    if (!status.ok())
      return status;
    if (reply.reply->type != REDIS_REPLY_INTEGER)
      return unexpected("STRLEN", reply);
    size = reply.reply->integer;
    return size == 0 ? StoreStatus::missing() : StoreStatus::success();
  }

  StoreStatus fetch(const std::string &key, int64_t maxBytes,
                    std::string &blob) override {
    Reply reply;
    StoreStatus status = command({"GET", key}, reply);
    if (!status.ok())
      return status;
    if (reply.reply->type == REDIS_REPLY_NIL)
      return StoreStatus::missing();
    if (reply.reply->type != REDIS_REPLY_STRING)
      return unexpected("GET", reply);
    if (int64_t(reply.reply->len) > maxBytes)
      return StoreStatus::failure(
          KVRT_BLOCK_TOO_LARGE,
          str(urlText, ": the blob has ", reply.reply->len,
              " bytes, more than the ", maxBytes, " allowed"));
    blob.assign(reply.reply->str, reply.reply->len);
    return StoreStatus::success();
  }

  StoreStatus put(const std::string &key, std::string_view blob,
                  int64_t ttlSeconds) override {
    Reply reply;
    std::vector<std::string_view> argv = {"SET", key, blob};
    std::string ttl = std::to_string(ttlSeconds);
    if (ttlSeconds > 0) {
      argv.push_back("EX");
      argv.push_back(ttl);
    }
    StoreStatus status = command(argv, reply);
    if (!status.ok())
      return status;
    if (reply.reply->type != REDIS_REPLY_STATUS)
      return unexpected("SET", reply);
    return StoreStatus::success();
  }

  StoreStatus remove(const std::string &key) override {
    Reply reply;
    StoreStatus status = command({"DEL", key}, reply);
    if (!status.ok())
      return status;
    if (reply.reply->type != REDIS_REPLY_INTEGER)
      return unexpected("DEL", reply);
    return StoreStatus::success();
  }

private:
  std::string urlText;
  RedisAddress address;
  kvrt_block_store_options options;
  /// Open connections by "host:port" (the URL's node, and the nodes of a
  /// cluster that redirections named).
  std::map<std::string, redisContext *> connections;

  static std::string nodeName(const std::string &host, int port) {
    return host + ":" + std::to_string(port);
  }

  StoreStatus unexpected(const char *what, const Reply &reply) {
    return StoreStatus::failure(KVRT_BLOCK_STORE_ERROR,
                                str(urlText, ": unexpected reply of type ",
                                    reply.reply->type, " to ", what));
  }

  /// The fault of a broken context, and drops it.
  StoreStatus broken(const std::string &node, redisContext *ctx,
                     const char *what) {
    std::string why = ctx->errstr;
    int err = ctx->err;
    bool timeout = err == REDIS_ERR_IO &&
                   (why.find("timed out") != std::string::npos ||
                    why.find("temporarily unavailable") != std::string::npos);
    Hiredis::get().free(ctx);
    connections.erase(node);
    if (timeout)
      return StoreStatus::failure(KVRT_BLOCK_TIMEOUT,
                                  str(urlText, ": no answer from ", node,
                                      " within ", options.io_timeout_ms,
                                      " ms (", what, ")"));
    if (err == REDIS_ERR_PROTOCOL)
      return StoreStatus::failure(
          KVRT_BLOCK_STORE_ERROR,
          str(urlText, ": protocol error from ", node, ": ", why));
    return StoreStatus::failure(KVRT_BLOCK_UNREACHABLE,
                                str(urlText, ": the connection to ", node,
                                    " broke (", what,
                                    "): ", why.empty() ? "closed" : why));
  }

  /// Sends one command on `ctx`, without redirections.
  StoreStatus send(const std::string &node, redisContext *ctx,
                   const std::vector<std::string_view> &argv, Reply &reply) {
    std::vector<const char *> args;
    std::vector<size_t> lengths;
    for (std::string_view a : argv) {
      args.push_back(a.data());
      lengths.push_back(a.size());
    }
    reply.reply = static_cast<redisReply *>(Hiredis::get().commandArgv(
        ctx, int(args.size()), args.data(), lengths.data()));
    if (!reply.reply)
      return broken(node, ctx, std::string(argv[0]).c_str());
    return StoreStatus::success();
  }

  /// The connection to `host:port`, connecting (and authenticating,
  /// selecting the database) when there is none.
  StoreStatus connection(const std::string &host, int port,
                         redisContext *&out) {
    std::string node = nodeName(host, port);
    if (redisContext *ctx = connections[node]) {
      out = ctx;
      return StoreStatus::success();
    }
    const Hiredis &api = Hiredis::get();
    if (!api.error.empty())
      return StoreStatus::failure(KVRT_BLOCK_UNREACHABLE,
                                  str(urlText, ": ", api.error));
    redisContext *ctx = api.connectWithTimeout(
        host.c_str(), port, toTimeval(options.connect_timeout_ms));
    if (!ctx)
      return StoreStatus::failure(
          KVRT_BLOCK_UNREACHABLE,
          str(urlText, ": cannot connect to ", node, ": out of memory"));
    if (ctx->err) {
      std::string why = ctx->errstr;
      api.free(ctx);
      connections.erase(node);
      bool timeout = why.find("timed out") != std::string::npos;
      return StoreStatus::failure(
          timeout ? KVRT_BLOCK_TIMEOUT : KVRT_BLOCK_UNREACHABLE,
          timeout ? str(urlText, ": cannot connect to ", node, " within ",
                        options.connect_timeout_ms, " ms")
                  : str(urlText, ": cannot connect to ", node, ": ", why));
    }
    api.setTimeout(ctx, toTimeval(options.io_timeout_ms));
    connections[node] = ctx;
    if (!address.password.empty()) {
      Reply reply;
      std::vector<std::string_view> argv = {"AUTH"};
      if (!address.user.empty())
        argv.push_back(address.user);
      argv.push_back(address.password);
      if (StoreStatus s = send(node, ctx, argv, reply); !s.ok())
        return s;
      if (reply.reply->type == REDIS_REPLY_ERROR)
        return refused(node, "AUTH", reply);
    }
    if (address.db != 0) {
      Reply reply;
      std::string db = std::to_string(address.db);
      if (StoreStatus s = send(node, ctx, {"SELECT", db}, reply); !s.ok())
        return s;
      if (reply.reply->type == REDIS_REPLY_ERROR)
        return refused(node, "SELECT", reply);
    }
    out = ctx;
    return StoreStatus::success();
  }

  StoreStatus refused(const std::string &node, const char *what,
                      const Reply &reply) {
    std::string message(reply.reply->str, reply.reply->len);
    if (redisContext *ctx = connections[node])
      Hiredis::get().free(ctx);
    connections.erase(node);
    return StoreStatus::failure(
        KVRT_BLOCK_STORE_ERROR,
        str(urlText, ": ", what, " refused by ", node, ": ", message));
  }

  /// Runs a single-key command, following cluster redirections.
  StoreStatus command(const std::vector<std::string_view> &argv, Reply &reply) {
    std::string host = address.host;
    int port = address.port;
    bool asking = false;
    for (int hop = 0; hop < 6; ++hop) {
      redisContext *ctx = nullptr;
      if (StoreStatus s = connection(host, port, ctx); !s.ok())
        return s;
      std::string node = nodeName(host, port);
      if (asking) {
        Reply ok;
        if (StoreStatus s = send(node, ctx, {"ASKING"}, ok); !s.ok())
          return s;
      }
      if (reply.reply) {
        Hiredis::get().freeReply(reply.reply);
        reply.reply = nullptr;
      }
      if (StoreStatus s = send(node, ctx, argv, reply); !s.ok())
        return s;
      if (reply.reply->type != REDIS_REPLY_ERROR)
        return StoreStatus::success();
      std::string message(reply.reply->str, reply.reply->len);
      // "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>".
      bool moved = message.rfind("MOVED ", 0) == 0;
      asking = message.rfind("ASK ", 0) == 0;
      if (!moved && !asking)
        return StoreStatus::failure(KVRT_BLOCK_STORE_ERROR,
                                    str(urlText, ": ", std::string(argv[0]),
                                        " failed on ", node, ": ", message));
      size_t space = message.rfind(' ');
      std::string target = message.substr(space + 1);
      size_t colon = target.rfind(':');
      long p = 0;
      if (colon == std::string::npos ||
          !parseInt(target.substr(colon + 1), 1, 65535, p))
        return StoreStatus::failure(
            KVRT_BLOCK_STORE_ERROR,
            str(urlText, ": a malformed redirection: ", message));
      host = colon == 0 ? address.host : target.substr(0, colon);
      port = int(p);
    }
    return StoreStatus::failure(
        KVRT_BLOCK_STORE_ERROR,
        str(urlText, ": more than 5 cluster redirections for one key"));
  }
};

#endif // KVIR_HAVE_HIREDIS

} // namespace

std::unique_ptr<BlockStore>
kvir::store::createRedisStore(const std::string &url,
                              const kvrt_block_store_options &options,
                              std::string &error) {
  RedisAddress address;
  if (!parseRedisUrl(url, address, error))
    return nullptr;
#ifdef KVIR_HAVE_HIREDIS
  return std::make_unique<RedisStore>(url, std::move(address), options);
#else
  error = "this runtime was built without hiredis (install libhiredis-dev "
          "and rebuild): redis:// stores are not available";
  return nullptr;
#endif
}
