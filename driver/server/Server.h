//===- Server.h - kv-serve's HTTP/1.1 front ---------------------*- C++ -*-===//
//
// The routes of kv-serve (docs/serve.md) over cpp-httplib: authentication
// (Bearer API keys, one tenant per key; /health is open), request
// decoding (Requests.h), JSON responses and errors, server-sent events for
// streamed generations, one JSON log line per request on stderr, and a
// graceful stop (no new connections, requests in flight finish). The work
// itself is the Engine's; HTTP requests are served by a pool of worker
// threads (--http-threads), each request on the thread that read it.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_SERVER_H
#define KVIR_DRIVER_SERVER_SERVER_H

#include "driver/server/Engine.h"
#include "driver/server/Metrics.h"

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace kvir::serve {

struct ServerOptions {
  /// Where to listen (port 0: any free port).
  std::string host = "127.0.0.1";
  int port = 8080;
  /// (tenant, key) pairs; none: no authentication, one tenant.
  std::vector<std::pair<std::string, std::string>> apiKeys;
  /// Worker threads serving connections.
  int threads = 16;
  RequestLimits limits;
  /// Seconds a connection may stay idle between requests.
  int keepAliveSeconds = 5;
};

class Server {
public:
  Server(Engine &engine, Metrics &metrics, ServerOptions options);
  ~Server();

  /// Binds the listening socket: the port (the chosen one for port 0), or
  /// -1 with `error`.
  int bind(std::string &error);
  /// Serves until stop(); returns once the requests in flight are done.
  bool serve();
  /// Stops accepting, lets the requests in flight finish (any thread).
  void stop();

  struct Impl;

private:
  std::unique_ptr<Impl> impl;
};

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_SERVER_H
