//===- Server.cpp - kv-serve's HTTP/1.1 front -------------------*- C++ -*-===//

#include "driver/server/Server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <ctime>

using namespace kvir;
using namespace kvir::serve;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

/// What the server knows about the request its thread is serving: set by
/// the pre-routing handler, completed by the route, logged once.
struct RequestState {
  std::string id, tenant, route, method, path;
  Clock::time_point start;
  RequestLog log;
  bool streaming = false, logged = false;
  std::string error;
};
thread_local RequestState current;

std::string dump(const Json &j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

void sendJson(httplib::Response &res, int status, const Json &body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

Json errorBody(const RequestError &e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? Json() : Json(e.param)},
            {"code", e.code}}}};
}

void sendError(httplib::Response &res, const RequestError &e) {
  current.error = e.message;
  sendJson(res, e.status, errorBody(e));
}

/// Constant-time comparison: a wrong key takes as long as any other.
bool sameKey(const std::string &a, const std::string &b) {
  unsigned char diff = a.size() != b.size();
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  return diff == 0;
}

/// The OpenAI finish reasons: stop and length (timeout and cancelled are
/// reported as length, with the real reason under "kvir").
std::string openAIFinish(const std::string &reason) {
  return reason == "stop" ? "stop" : "length";
}

} // namespace

struct Server::Impl {
  Impl(Engine &engine, Metrics &metrics, ServerOptions options)
      : engine(engine), metrics(metrics), options(std::move(options)) {}

  Engine &engine;
  Metrics &metrics;
  ServerOptions options;
  httplib::Server http;
  std::atomic<bool> draining{false};

  void routes();
  /// Counts the request and writes its log line, once.
  void finish(int status);
  /// Runs `fn` (a route), turning any exception into a 500.
  template <typename Fn>
  void guarded(httplib::Response &res, const char *route, Fn &&fn) {
    current.route = route;
    try {
      fn();
    } catch (const std::exception &e) {
      sendError(res, requestError(500, "internal_error",
                                  std::string("internal error: ") + e.what()));
    } catch (...) {
      sendError(res, requestError(500, "internal_error", "internal error"));
    }
  }
  /// Responds with `out` or `error`.
  void reply(httplib::Response &res, bool ok, const Json &out,
             const RequestError &error, int status = 200) {
    if (ok)
      sendJson(res, status, out);
    else
      sendError(res, error);
  }
  /// A streamed generation: `run` is called with the sink once the
  /// response has started; it returns the summary or an error.
  using Runner = std::function<bool(const Engine::Sink &, Json &,
                                    RequestError &, RequestLog &)>;
  void stream(httplib::Response &res, Runner run,
              std::function<Json(const Json &)> chunk,
              std::function<Json(const Json &)> last);
  Json completionBody(const Json &out, bool chat, bool echo,
                      const std::string &prompt);

  /// A POST route: the body decoded by `decode`, then `call` (the path's
  /// match, the decoded request, the response, the error), answered with
  /// `status` on success.
  template <typename Request, typename Call>
  void post(const char *pattern, const char *route,
            bool (*decode)(const std::string &, const RequestLimits &,
                           Request &, RequestError &),
            int status, Call call) {
    http.Post(pattern, [this, route, decode, status,
                        call](const httplib::Request &req,
                              httplib::Response &res) {
      guarded(res, route, [&] {
        Request request;
        RequestError error;
        Json out;
        std::string match = req.matches.size() > 1 ? req.matches[1].str() : "";
        bool ok = decode(req.body, options.limits, request, error) &&
                  call(match, request, out, error);
        reply(res, ok, out, error, status);
      });
    });
  }
};

void Server::Impl::finish(int status) {
  if (current.logged || current.streaming)
    return;
  current.logged = true;
  double seconds =
      std::chrono::duration<double>(Clock::now() - current.start).count();
  std::string route = current.route.empty() ? "none" : current.route;
  metrics.add("kvserve_requests_total", 1,
              "route=\"" + route + "\",code=\"" + std::to_string(status) +
                  "\"");
  metrics.observe("kvserve_request_seconds", seconds);
  if (route == "health" || route == "metrics")
    return;
  Json line = {{"time", int64_t(std::time(nullptr))},
               {"request_id", current.id},
               {"method", current.method},
               {"path", current.path},
               {"route", route},
               {"status", status},
               {"ms", seconds * 1e3},
               {"tenant", current.tenant}};
  const RequestLog &log = current.log;
  if (!log.context.empty())
    line["context"] = log.context;
  if (log.prefilled || log.reused || log.recomputed || log.generated) {
    line["prefilled"] = log.prefilled;
    line["reused"] = log.reused;
    line["recomputed"] = log.recomputed;
    line["generated"] = log.generated;
  }
  if (log.ttftMs >= 0)
    line["ttft_ms"] = log.ttftMs;
  for (auto it = log.extra.begin(); it != log.extra.end(); ++it)
    line[it.key()] = it.value();
  if (!current.error.empty())
    line["error"] = current.error;
  writeLogLine(line);
}

void Server::Impl::stream(httplib::Response &res, Runner run,
                          std::function<Json(const Json &)> chunk,
                          std::function<Json(const Json &)> last) {
  current.streaming = true;
  res.set_header("Cache-Control", "no-cache");
  RequestState state = current;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, run, chunk, last, state](size_t, httplib::DataSink &sink) {
        current = state;
        current.streaming = false;
        auto write = [&](const std::string &text) {
          return sink.is_writable() && sink.write(text.data(), text.size());
        };
        Engine::Sink events = [&](const Json &event) {
          return write("data: " + dump(chunk(event)) + "\n\n");
        };
        Json out;
        RequestError error;
        bool ok = false;
        try {
          ok = run(events, out, error, current.log);
        } catch (const std::exception &e) {
          error = requestError(500, "internal_error",
                               std::string("internal error: ") + e.what());
        }
        if (ok) {
          write("data: " + dump(last(out)) + "\n\n");
        } else {
          current.error = error.message;
          write("data: " + dump(errorBody(error)) + "\n\n");
        }
        write("data: [DONE]\n\n");
        sink.done();
        finish(ok ? 200 : error.status);
        return true;
      });
}

Json Server::Impl::completionBody(const Json &out, bool chat, bool echo,
                                  const std::string &prompt) {
  std::string text = out.value("text", std::string());
  Json choice = {{"index", 0},
                 {"finish_reason", openAIFinish(out["finish_reason"])},
                 {"logprobs", nullptr}};
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = echo ? prompt + text : text;
  int64_t promptTokens = out["prompt_tokens"],
          completion = out["completion_tokens"];
  return {
      {"id", randomId(chat ? "chatcmpl-" : "cmpl-")},
      {"object", chat ? "chat.completion" : "text_completion"},
      {"created", int64_t(std::time(nullptr))},
      {"model", engine.modelId()},
      {"choices", {choice}},
      {"usage",
       {{"prompt_tokens", promptTokens},
        {"completion_tokens", completion},
        {"total_tokens", promptTokens + completion},
        {"prompt_tokens_details", {{"cached_tokens", out["cached_tokens"]}}}}},
      {"kvir",
       {{"token_ids", out["token_ids"]},
        {"finish_reason", out["finish_reason"]},
        {"seed", out["seed"]},
        {"ttft_ms", out["ttft_ms"]},
        {"decode_tokens_per_s", out["decode_tokens_per_s"]}}}};
}

void Server::Impl::routes() {
  const RequestLimits &limits = options.limits;
  http.Get("/health", [this](const httplib::Request &, httplib::Response &res) {
    guarded(res, "health", [&] {
      Json body = engine.health();
      if (draining) {
        body["status"] = "draining";
        sendJson(res, 503, body);
        return;
      }
      sendJson(res, 200, body);
    });
  });
  http.Get(
      "/metrics", [this](const httplib::Request &, httplib::Response &res) {
        guarded(res, "metrics", [&] {
          res.set_content(engine.metricsText(), "text/plain; version=0.0.4");
        });
      });
  http.Get(
      "/v1/models", [this](const httplib::Request &, httplib::Response &res) {
        guarded(res, "models", [&] { sendJson(res, 200, engine.models()); });
      });

  // Contexts.
  post("/v1/contexts", "contexts.create", decodeCreateContext, 201,
       [this](const std::string &, const CreateContextRequest &request,
              Json &out, RequestError &error) {
         return engine.createContext(current.tenant, request, out, error,
                                     current.log);
       });
  http.Get("/v1/contexts",
           [this](const httplib::Request &, httplib::Response &res) {
             guarded(res, "contexts.list", [&] {
               sendJson(res, 200, engine.listContexts(current.tenant));
             });
           });
  http.Get(R"(/v1/contexts/([A-Za-z0-9_]+))",
           [this](const httplib::Request &req, httplib::Response &res) {
             guarded(res, "contexts.read", [&] {
               RequestError error;
               Json out;
               bool tokens = req.has_param("tokens") &&
                             req.get_param_value("tokens") != "0" &&
                             req.get_param_value("tokens") != "false";
               bool ok = engine.readContext(current.tenant, req.matches[1],
                                            tokens, out, error);
               reply(res, ok, out, error);
             });
           });
  http.Delete(R"(/v1/contexts/([A-Za-z0-9_]+))",
              [this](const httplib::Request &req, httplib::Response &res) {
                guarded(res, "contexts.delete", [&] {
                  RequestError error;
                  Json out;
                  bool ok = engine.deleteContext(current.tenant, req.matches[1],
                                                 out, error);
                  reply(res, ok, out, error);
                });
              });
  post(R"(/v1/contexts/([A-Za-z0-9_]+)/segments)", "contexts.append",
       decodeAppend, 200,
       [this](const std::string &id, const AppendRequest &request, Json &out,
              RequestError &error) {
         return engine.append(current.tenant, id, request, out, error,
                              current.log);
       });
  post(R"(/v1/contexts/([A-Za-z0-9_]+)/edit)", "contexts.edit", decodeEdit, 200,
       [this](const std::string &id, const EditRequest &request, Json &out,
              RequestError &error) {
         return engine.edit(current.tenant, id, request, out, error,
                            current.log);
       });
  post(R"(/v1/contexts/([A-Za-z0-9_]+)/compose)", "contexts.compose",
       decodeCompose, 200,
       [this](const std::string &id, const ComposeRequest &request, Json &out,
              RequestError &error) {
         return engine.compose(current.tenant, id, request, out, error,
                               current.log);
       });
  http.Post(
      R"(/v1/contexts/([A-Za-z0-9_]+)/generate)",
      [this, &limits](const httplib::Request &req, httplib::Response &res) {
        guarded(res, "contexts.generate", [&] {
          auto request = std::make_shared<GenerateRequest>();
          RequestError error;
          if (!decodeGenerate(req.body, limits, *request, error))
            return sendError(res, error);
          std::string id = req.matches[1], tenant = current.tenant;
          if (!request->sampling.stream) {
            Json out;
            bool ok = engine.generate(tenant, id, *request, nullptr, out, error,
                                      current.log);
            return reply(res, ok, out, error);
          }
          // A context that is not there is a 404 before the stream starts.
          Json probe;
          if (!engine.readContext(tenant, id, false, probe, error))
            return sendError(res, error);
          stream(
              res,
              [this, request, id, tenant](const Engine::Sink &sink, Json &out,
                                          RequestError &error,
                                          RequestLog &log) {
                return engine.generate(tenant, id, *request, sink, out, error,
                                       log);
              },
              [](const Json &event) { return event; },
              [](const Json &out) {
                Json last = out;
                last["done"] = true;
                return last;
              });
        });
      });

  // Blocks.
  post("/v1/blocks", "blocks.create", decodeBlock, 201,
       [this](const std::string &, const BlockRequest &request, Json &out,
              RequestError &error) {
         return engine.createBlock(current.tenant, request, out, error,
                                   current.log);
       });
  http.Get(
      "/v1/blocks", [this](const httplib::Request &, httplib::Response &res) {
        guarded(res, "blocks.list",
                [&] { sendJson(res, 200, engine.listBlocks(current.tenant)); });
      });
  http.Delete(R"(/v1/blocks/([A-Za-z0-9_]+))",
              [this](const httplib::Request &req, httplib::Response &res) {
                guarded(res, "blocks.delete", [&] {
                  RequestError error;
                  Json out;
                  bool ok = engine.deleteBlock(current.tenant, req.matches[1],
                                               out, error);
                  reply(res, ok, out, error);
                });
              });

  // OpenAI.
  auto openAI = [this, &limits](bool chat) {
    return [this, &limits, chat](const httplib::Request &req,
                                 httplib::Response &res) {
      guarded(res, chat ? "chat.completions" : "completions", [&] {
        RequestError error;
        auto completion = std::make_shared<CompletionRequest>();
        auto conversation = std::make_shared<ChatRequest>();
        bool decoded =
            chat ? decodeChat(req.body, limits, *conversation, error)
                 : decodeCompletion(req.body, limits, *completion, error);
        if (!decoded)
          return sendError(res, error);
        const Sampling &sampling =
            chat ? conversation->sampling : completion->sampling;
        bool echo = !chat && completion->echo;
        std::string prompt = completion->prompt.text;
        std::string tenant = current.tenant;
        auto run = [this, chat, completion, conversation,
                    tenant](const Engine::Sink &sink, Json &out,
                            RequestError &error, RequestLog &log) {
          return chat
                     ? engine.chat(tenant, *conversation, sink, out, error, log)
                     : engine.complete(tenant, *completion, sink, out, error,
                                       log);
        };
        if (!sampling.stream) {
          Json out;
          if (!run(nullptr, out, error, current.log))
            return sendError(res, error);
          return sendJson(res, 200, completionBody(out, chat, echo, prompt));
        }
        std::string id = randomId(chat ? "chatcmpl-" : "cmpl-");
        int64_t created = int64_t(std::time(nullptr));
        std::string model = engine.modelId();
        auto first = std::make_shared<bool>(true);
        auto frame = [id, created, model, chat](Json choice) {
          return Json{
              {"id", id},
              {"object", chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", model},
              {"choices", {std::move(choice)}}};
        };
        stream(
            res, run,
            [frame, chat, first](const Json &event) {
              Json choice = {{"index", 0}, {"finish_reason", nullptr}};
              std::string text = event.value("text", std::string());
              if (chat) {
                choice["delta"] = {{"content", text}};
                if (*first)
                  choice["delta"]["role"] = "assistant";
              } else {
                choice["text"] = text;
                choice["logprobs"] = nullptr;
              }
              *first = false;
              Json chunk = frame(choice);
              if (event.contains("token"))
                chunk["kvir"] = {{"token", event["token"]}};
              return chunk;
            },
            [frame, chat](const Json &out) {
              Json choice = {
                  {"index", 0},
                  {"finish_reason", openAIFinish(out["finish_reason"])}};
              if (chat)
                choice["delta"] = Json::object();
              else
                choice["text"] = "";
              Json chunk = frame(choice);
              int64_t promptTokens = out["prompt_tokens"],
                      completion = out["completion_tokens"];
              chunk["usage"] = {{"prompt_tokens", promptTokens},
                                {"completion_tokens", completion},
                                {"total_tokens", promptTokens + completion},
                                {"prompt_tokens_details",
                                 {{"cached_tokens", out["cached_tokens"]}}}};
              chunk["kvir"] = {
                  {"token_ids", out["token_ids"]},
                  {"finish_reason", out["finish_reason"]},
                  {"seed", out["seed"]},
                  {"ttft_ms", out["ttft_ms"]},
                  {"decode_tokens_per_s", out["decode_tokens_per_s"]}};
              return chunk;
            });
      });
    };
  };
  http.Post("/v1/completions", openAI(false));
  http.Post("/v1/chat/completions", openAI(true));
}

Server::Server(Engine &engine, Metrics &metrics, ServerOptions options)
    : impl(std::make_unique<Impl>(engine, metrics, std::move(options))) {
  Impl &m = *impl;
  int threads = m.options.threads > 0 ? m.options.threads : 1;
  m.http.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  m.http.set_payload_max_length(m.options.limits.maxBodyBytes);
  m.http.set_keep_alive_timeout(m.options.keepAliveSeconds);
  m.http.set_read_timeout(30);
  m.http.set_write_timeout(30);
  m.http.set_pre_routing_handler([&m](const httplib::Request &req,
                                      httplib::Response &res) {
    current = RequestState();
    current.start = Clock::now();
    current.id = randomId("req_");
    current.log.requestId = current.id;
    current.tenant = "default";
    current.method = req.method;
    current.path = req.path;
    res.set_header("X-Request-Id", current.id);
    if (req.path == "/health")
      return httplib::Server::HandlerResponse::Unhandled;
    if (!m.options.apiKeys.empty()) {
      std::string header = req.get_header_value("Authorization");
      const std::string bearer = "Bearer ";
      bool found = false;
      if (header.rfind(bearer, 0) == 0) {
        std::string key = header.substr(bearer.size());
        for (const auto &[tenant, k] : m.options.apiKeys)
          if (sameKey(key, k)) {
            current.tenant = tenant;
            found = true;
          }
      }
      if (!found) {
        current.route = "auth";
        res.set_header("WWW-Authenticate", "Bearer");
        sendError(res,
                  requestError(401, "invalid_api_key",
                               header.empty()
                                   ? "missing API key: send Authorization: "
                                     "Bearer KEY"
                                   : "invalid API key"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (m.draining) {
      current.route = "draining";
      sendError(res,
                requestError(503, "draining", "the server is shutting down"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Errors httplib produces by itself (no route, a body over the limit, a
  // malformed request) get a JSON body too.
  m.http.set_error_handler([&m](const httplib::Request &req,
                                httplib::Response &res) {
    if (!res.body.empty())
      return;
    if (current.logged || current.path != req.path) {
      // A request refused before routing (no pre-routing call).
      current = RequestState();
      current.start = Clock::now();
      current.id = randomId("req_");
      current.method = req.method;
      current.path = req.path;
    }
    if (current.route.empty())
      current.route = "none";
    std::string message =
        res.status == 404 ? "no route " + req.method + " " + req.path +
                                " (docs/serve.md lists the endpoints)"
        : res.status == 413
            ? "the body is larger than the limit of " +
                  std::to_string(m.options.limits.maxBodyBytes) +
                  " bytes (--max-body-bytes)"
            : "bad request (HTTP status " + std::to_string(res.status) + ")";
    sendError(res, requestError(res.status,
                                res.status == 404   ? "not_found"
                                : res.status == 413 ? "body_too_large"
                                                    : "bad_request",
                                message));
  });
  m.http.set_exception_handler(
      [](const httplib::Request &, httplib::Response &res, std::exception_ptr) {
        sendError(res, requestError(500, "internal_error", "internal error"));
      });
  m.http.set_logger(
      [&m](const httplib::Request &req, const httplib::Response &res) {
        m.finish(res.status);
      });
  m.routes();
}

Server::~Server() = default;

int Server::bind(std::string &error) {
  Impl &m = *impl;
  int port = m.options.port;
  bool ok = port == 0 ? (port = m.http.bind_to_any_port(m.options.host)) > 0
                      : m.http.bind_to_port(m.options.host, port);
  if (!ok) {
    error = "cannot listen on " + m.options.host + ":" +
            std::to_string(m.options.port) +
            " (in use, or not an address of this machine)";
    return -1;
  }
  return port;
}

bool Server::serve() { return impl->http.listen_after_bind(); }

void Server::stop() {
  impl->draining = true;
  impl->http.stop();
}
