// WorkerRecord's JSON form.
#include "server/worker_record.h"

namespace deepinfer::server {

using Json = nlohmann::json;

Json worker_record_to_json(const WorkerRecord& r) {
  const WorkerLoadReport& l = r.load;
  Json json{{"id", r.id},
            {"host", r.host},
            {"port", r.port},
            {"role", r.role},
            {"model", r.model},
            {"block_size", r.block_size},
            {"max_model_len", r.max_model_len},
            {"kv_port", r.kv_port},
            {"heartbeat", r.heartbeat},
            {"load",
             {{"queued_tokens", l.queued_tokens},
              {"num_waiting", l.num_waiting},
              {"num_running", l.num_running},
              {"kv_usage", l.kv_usage},
              {"kv_tokens_used", l.kv_tokens_used},
              {"kv_tokens_free", l.kv_tokens_free},
              {"cached_tokens", l.cached_tokens}}}};
  if (r.max_body_bytes > 0) json["max_body_bytes"] = r.max_body_bytes;
  if (!r.dp_group.empty()) {
    json["dp_group"] = r.dp_group;
    json["dp_rank"] = r.dp_rank;
  }
  return json;
}

Result<WorkerRecord> worker_record_from_json(const Json& json) {
  try {
    WorkerRecord r;
    r.id = json.at("id").get<std::string>();
    r.host = json.at("host").get<std::string>();
    r.port = json.at("port").get<uint16_t>();
    r.role = json.at("role").get<std::string>();
    r.model = json.at("model").get<std::string>();
    r.block_size = json.at("block_size").get<int32_t>();
    r.max_model_len = json.at("max_model_len").get<int32_t>();
    if (auto it = json.find("kv_port"); it != json.end()) r.kv_port = it->get<uint16_t>();
    if (auto it = json.find("max_body_bytes"); it != json.end()) r.max_body_bytes = it->get<int64_t>();
    if (auto it = json.find("dp_group"); it != json.end()) {
      r.dp_group = it->get<std::string>();
      r.dp_rank = json.at("dp_rank").get<int32_t>();
    }
    r.heartbeat = json.at("heartbeat").get<int64_t>();
    const Json& l = json.at("load");
    r.load.queued_tokens = l.at("queued_tokens").get<int64_t>();
    r.load.num_waiting = l.at("num_waiting").get<int64_t>();
    r.load.num_running = l.at("num_running").get<int64_t>();
    r.load.kv_usage = l.at("kv_usage").get<double>();
    r.load.kv_tokens_used = l.at("kv_tokens_used").get<int64_t>();
    r.load.kv_tokens_free = l.at("kv_tokens_free").get<int64_t>();
    r.load.cached_tokens = l.at("cached_tokens").get<int64_t>();
    return r;
  } catch (const Json::exception& e) {
    return Error{std::string("bad worker record: ") + e.what()};
  }
}

}  // namespace deepinfer::server
