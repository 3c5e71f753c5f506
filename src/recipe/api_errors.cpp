// Error objects and bodies in each API's shape.
#include "recipe/api.h"

namespace deepinfer {

ApiError api_error(ApiKind kind, int status, std::string message, std::string param) {
  const bool anthropic = kind == ApiKind::kMessages;
  std::string type;
  switch (status) {
    case 400:
    case 405:
    case 422:
      type = "invalid_request_error";
      break;
    case 413:
      type = anthropic ? "request_too_large" : "invalid_request_error";
      break;
    case 408:
    case 504:
      type = "timeout_error";
      break;
    case 401:
      type = "authentication_error";
      break;
    case 403:
      type = "permission_error";
      break;
    case 404:
      type = "not_found_error";
      break;
    case 429:
      type = "rate_limit_error";
      break;
    case 529:
      type = "overloaded_error";
      break;
    default:
      type = anthropic ? "api_error" : "server_error";
      break;
  }
  return ApiError{status, std::move(type), std::move(param), std::move(message)};
}

ApiError model_not_found_error(ApiKind kind, const std::string& requested, const std::string& served_name) {
  return api_error(kind, 404,
                   "The model '" + requested + "' does not exist; this server serves '" + served_name + "'", "model");
}

std::string error_body(ApiKind kind, const ApiError& error) {
  nlohmann::ordered_json body;
  if (kind == ApiKind::kMessages) {
    body = {{"type", "error"}, {"error", {{"type", error.type}, {"message", error.message}}}};
  } else {
    body = {{"error",
             {{"message", error.message},
              {"type", error.type},
              {"param", error.param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(error.param)},
              {"code", nlohmann::ordered_json()}}}};
  }
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace deepinfer
