//===- ServeProcess.h - A kv-serve process and its client -------*- C++ -*-===//
//
// What the tests (test/unit/server) and the serving benchmark
// (bench/ServeBench.cpp) share: starting the real kv-serve binary on an
// ephemeral port (it prints the port first on stdout), talking to it over
// real HTTP with cpp-httplib's client (JSON, and server-sent events as they
// arrive), reading its log (stderr, kept in a file) and its resident
// memory, and stopping it with a signal. Header-only: its users link
// cpp-httplib and nlohmann::json, not the server.
//
//===----------------------------------------------------------------------===//

#ifndef KVIR_DRIVER_SERVER_SERVEPROCESS_H
#define KVIR_DRIVER_SERVER_SERVEPROCESS_H

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

namespace kvir::serve {

using Json = nlohmann::json;

/// One HTTP exchange: status and body (JSON when it parses).
struct Reply {
  int status = 0;
  std::string body;
  Json json;
};

class ServeProcess {
public:
  ServeProcess() = default;
  ServeProcess(const ServeProcess &) = delete;
  ServeProcess &operator=(const ServeProcess &) = delete;
  ~ServeProcess() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }

  /// Starts `binary` with `args` and --port 0, its stderr into `log`;
  /// false with `error` when it does not print a port within 60 s.
  bool start(const std::string &binary, std::vector<std::string> args,
             const std::string &log, std::string &error) {
    logPath = log;
    int out[2];
    if (pipe(out)) {
      error = "pipe failed";
      return false;
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addopen(&actions, 2, logPath.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    args.insert(args.begin(), binary);
    args.push_back("--port");
    args.push_back("0");
    std::vector<char *> argv;
    for (std::string &a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(),
                         environ);
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    if (rc) {
      close(out[0]);
      pid = -1;
      error = "cannot start " + binary;
      return false;
    }
    std::string line;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (line.find('\n') == std::string::npos &&
           std::chrono::steady_clock::now() < deadline) {
      pollfd fd{out[0], POLLIN, 0};
      if (poll(&fd, 1, 200) <= 0)
        continue;
      char buffer[64];
      ssize_t n = read(out[0], buffer, sizeof(buffer));
      if (n <= 0)
        break;
      line.append(buffer, size_t(n));
    }
    close(out[0]);
    port = std::atoi(line.c_str());
    if (port <= 0) {
      error = "kv-serve printed no port; its log:\n" + this->log();
      return false;
    }
    return true;
  }

  /// Sends `signal` and waits: the exit status (-1 when killed by a
  /// signal).
  int stop(int signal = SIGTERM) {
    if (pid <= 0)
      return -1;
    kill(pid, signal);
    int status = 0;
    waitpid(pid, &status, 0);
    pid = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string log() const {
    std::ifstream file(logPath);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  }

  /// Resident memory in KiB.
  long rssKb() const {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("VmRSS:", 0) == 0)
        return std::atol(line.c_str() + 6);
    return -1;
  }

  httplib::Client client(const std::string &key = "") const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120);
    if (!key.empty())
      c.set_bearer_token_auth(key.c_str());
    return c;
  }

  Reply request(const std::string &method, const std::string &path,
                const std::string &body = "", const std::string &key = "") {
    httplib::Client c = client(key);
    httplib::Result r = method == "GET" ? c.Get(path.c_str())
                        : method == "DELETE"
                            ? c.Delete(path.c_str())
                            : c.Post(path.c_str(), body, "application/json");
    Reply reply;
    if (!r)
      return reply;
    reply.status = r->status;
    reply.body = r->body;
    reply.json = Json::parse(r->body, nullptr, false);
    return reply;
  }
  Reply post(const std::string &path, const Json &body,
             const std::string &key = "") {
    return request("POST", path, body.dump(), key);
  }
  Reply get(const std::string &path, const std::string &key = "") {
    return request("GET", path, "", key);
  }

  /// POSTs `body` and collects the `data:` events of the event stream, in
  /// order, as they arrive; `onEvent` (when given) sees each at once.
  std::vector<std::string>
  stream(const std::string &path, const Json &body, int &status,
         const std::function<void(const std::string &)> &onEvent = nullptr) {
    httplib::Client c = client();
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    std::string pending;
    std::vector<std::string> events;
    req.content_receiver = [&](const char *data, size_t length, uint64_t,
                               uint64_t) {
      pending.append(data, length);
      for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        if (event.rfind("data: ", 0) == 0) {
          events.push_back(event.substr(6));
          if (onEvent)
            onEvent(events.back());
        }
      }
      return true;
    };
    httplib::Result r = c.send(req);
    status = r ? r->status : 0;
    return events;
  }

  pid_t pid = -1;
  int port = 0;
  std::string logPath;
};

} // namespace kvir::serve

#endif // KVIR_DRIVER_SERVER_SERVEPROCESS_H
