// Parsing Mooncake trace lines, one at a time, with the line number in every error.
#include "cluster/request_trace.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace deepinfer {
namespace {

Result<TraceRequest> parse_record(const std::string& line) {
  const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
  if (record.is_discarded() || !record.is_object()) return Error{"not a JSON object"};
  for (const char* key : {"timestamp", "input_length", "output_length", "hash_ids"}) {
    if (!record.contains(key)) return Error{std::string("no \"") + key + "\" field"};
  }
  if (!record["timestamp"].is_number() || record["timestamp"].get<double>() < 0) {
    return Error{"\"timestamp\" must be a non-negative number of milliseconds"};
  }
  if (!record["input_length"].is_number_integer() || record["input_length"].get<int64_t>() < 1) {
    return Error{"\"input_length\" must be a positive integer"};
  }
  if (!record["output_length"].is_number_integer() || record["output_length"].get<int64_t>() < 1) {
    return Error{"\"output_length\" must be a positive integer"};
  }
  if (!record["hash_ids"].is_array()) return Error{"\"hash_ids\" must be an array of block ids"};
  TraceRequest request;
  request.timestamp_ms = record["timestamp"].get<double>();
  request.input_tokens = record["input_length"].get<int64_t>();
  request.output_tokens = record["output_length"].get<int64_t>();
  for (const nlohmann::json& id : record["hash_ids"]) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      return Error{"\"hash_ids\" must hold non-negative integers, got " + id.dump()};
    }
    request.block_hashes.push_back(id.get<uint64_t>());
  }
  return request;
}

}  // namespace

Result<std::vector<TraceRequest>> read_mooncake_trace(const std::string& path, int64_t max_requests) {
  std::ifstream in(path);
  if (!in) return Error{"cannot open the trace " + path};
  std::vector<TraceRequest> requests;
  std::string line;
  for (int64_t line_number = 1; std::getline(in, line); ++line_number) {
    if (max_requests > 0 && static_cast<int64_t>(requests.size()) >= max_requests) break;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    Result<TraceRequest> request = parse_record(line);
    if (!request.ok()) return Error{path + ":" + std::to_string(line_number) + ": " + request.error().message};
    if (!requests.empty() && request->timestamp_ms < requests.back().timestamp_ms) {
      return Error{path + ":" + std::to_string(line_number) + ": timestamp " + std::to_string(request->timestamp_ms) +
                   " is earlier than the line before (a trace must be in arrival order)"};
    }
    requests.push_back(std::move(request).value());
  }
  if (requests.empty()) return Error{path + ": no requests"};
  return requests;
}

}  // namespace deepinfer
