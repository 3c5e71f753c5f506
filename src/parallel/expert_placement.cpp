// ExpertPlacement's checks, the contiguous start placement and the JSON file form.
#include "parallel/expert_placement.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/mapped_file.h"

namespace deepinfer {

namespace {

constexpr std::string_view kFormatName = "deepinfer-expert-placement";
constexpr int kFormatVersion = 1;

// Reads a required non-negative integer field of one layer's object.
Result<int32_t> int_field(const nlohmann::json& layer, const char* name, size_t layer_index) {
  const auto it = layer.find(name);
  if (it == layer.end() || !it->is_number_integer() || *it < 0 || *it > std::numeric_limits<int32_t>::max()) {
    return Error{"expert placement: moe_layers[" + std::to_string(layer_index) + "] needs a non-negative integer \"" +
                 name + "\""};
  }
  return it->get<int32_t>();
}

}  // namespace

std::vector<std::vector<int32_t>> ExpertPlacement::replicas() const {
  std::vector<std::vector<int32_t>> slots(static_cast<size_t>(num_logical_experts));
  for (int32_t p = 0; p < static_cast<int32_t>(physical_to_logical.size()); ++p) {
    slots[static_cast<size_t>(physical_to_logical[p])].push_back(p);
  }
  return slots;
}

std::vector<int32_t> ExpertPlacement::replica_counts() const {
  std::vector<int32_t> counts(static_cast<size_t>(num_logical_experts), 0);
  for (const int32_t logical : physical_to_logical) ++counts[static_cast<size_t>(logical)];
  return counts;
}

int32_t ExpertPlacement::experts_gained_from(const ExpertPlacement& before) const {
  DI_CHECK(before.num_ranks == num_ranks && before.slots_per_rank == slots_per_rank,
           "experts_gained_from: placements of different shapes");
  int32_t gained = 0;
  for (int32_t r = 0; r < num_ranks; ++r) {
    const auto held_first = before.physical_to_logical.begin() + r * slots_per_rank;
    const auto held_last = held_first + slots_per_rank;
    for (int32_t slot = r * slots_per_rank; slot < (r + 1) * slots_per_rank; ++slot) {
      gained += std::find(held_first, held_last, physical_to_logical[static_cast<size_t>(slot)]) == held_last ? 1 : 0;
    }
  }
  return gained;
}

Result<void> ExpertPlacement::validate() const {
  if (num_logical_experts <= 0) {
    return Error{"expert placement: num_logical_experts must be positive, got " + std::to_string(num_logical_experts)};
  }
  if (num_ranks <= 0) return Error{"expert placement: num_ranks must be positive, got " + std::to_string(num_ranks)};
  if (slots_per_rank <= 0) {
    return Error{"expert placement: slots_per_rank must be positive, got " + std::to_string(slots_per_rank)};
  }
  if (static_cast<int64_t>(physical_to_logical.size()) != static_cast<int64_t>(num_ranks) * slots_per_rank) {
    return Error{"expert placement: physical_to_logical has " + std::to_string(physical_to_logical.size()) +
                 " slots but num_ranks * slots_per_rank = " + std::to_string(num_ranks) + " * " +
                 std::to_string(slots_per_rank)};
  }
  std::vector<bool> placed(static_cast<size_t>(num_logical_experts), false);
  for (size_t p = 0; p < physical_to_logical.size(); ++p) {
    const int32_t logical = physical_to_logical[p];
    if (logical < 0 || logical >= num_logical_experts) {
      return Error{"expert placement: slot " + std::to_string(p) + " holds expert " + std::to_string(logical) +
                   ", outside [0, " + std::to_string(num_logical_experts) + ")"};
    }
    placed[static_cast<size_t>(logical)] = true;
  }
  for (int32_t e = 0; e < num_logical_experts; ++e) {
    if (!placed[static_cast<size_t>(e)]) {
      return Error{"expert placement: logical expert " + std::to_string(e) +
                   " has no slot (every expert needs at least one)"};
    }
  }
  return {};
}

Result<ExpertPlacement> ExpertPlacement::contiguous(int32_t num_logical, int32_t num_ranks, int32_t num_redundant) {
  if (num_logical <= 0 || num_ranks <= 0 || num_redundant < 0) {
    return Error{"expert placement: need num_logical > 0, num_ranks > 0 and num_redundant >= 0, got " +
                 std::to_string(num_logical) + ", " + std::to_string(num_ranks) + ", " +
                 std::to_string(num_redundant)};
  }
  const int32_t num_physical = num_logical + num_redundant;
  if (num_physical % num_ranks != 0) {
    return Error{"expert placement: " + std::to_string(num_logical) + " experts + " + std::to_string(num_redundant) +
                 " redundant = " + std::to_string(num_physical) + " slots do not split evenly over " +
                 std::to_string(num_ranks) + " ranks; pick num_redundant so the sum is a multiple of the ranks"};
  }
  ExpertPlacement placement;
  placement.num_logical_experts = num_logical;
  placement.num_ranks = num_ranks;
  placement.slots_per_rank = num_physical / num_ranks;
  placement.physical_to_logical.resize(static_cast<size_t>(num_physical));
  for (int32_t p = 0; p < num_physical; ++p) placement.physical_to_logical[static_cast<size_t>(p)] = p % num_logical;
  return placement;
}

std::string placements_to_json(const std::vector<ExpertPlacement>& placements) {
  nlohmann::json layers = nlohmann::json::array();
  for (const ExpertPlacement& placement : placements) {
    layers.push_back({{"num_logical_experts", placement.num_logical_experts},
                      {"num_ranks", placement.num_ranks},
                      {"slots_per_rank", placement.slots_per_rank},
                      {"physical_to_logical", placement.physical_to_logical}});
  }
  const nlohmann::json root = {{"format", kFormatName}, {"version", kFormatVersion}, {"moe_layers", layers}};
  return root.dump(1) + "\n";
}

Result<std::vector<ExpertPlacement>> placements_from_json(std::string_view text) {
  const nlohmann::json root = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Error{"expert placement: the file is not valid JSON"};
  const auto format = root.is_object() ? root.find("format") : root.end();
  if (!root.is_object() || format == root.end() || *format != kFormatName) {
    return Error{"expert placement: expected an object with \"format\": \"" + std::string(kFormatName) + "\""};
  }
  const auto version = root.find("version");
  if (version == root.end() || *version != kFormatVersion) {
    return Error{"expert placement: unsupported version (this build reads version " +
                 std::to_string(kFormatVersion) + ")"};
  }
  const auto layers = root.find("moe_layers");
  if (layers == root.end() || !layers->is_array()) {
    return Error{"expert placement: needs a \"moe_layers\" array, one entry per MoE layer"};
  }
  std::vector<ExpertPlacement> placements;
  for (size_t i = 0; i < layers->size(); ++i) {
    const nlohmann::json& layer = (*layers)[i];
    if (!layer.is_object()) return Error{"expert placement: moe_layers[" + std::to_string(i) + "] is not an object"};
    ExpertPlacement placement;
    DI_ASSIGN(placement.num_logical_experts, int_field(layer, "num_logical_experts", i));
    DI_ASSIGN(placement.num_ranks, int_field(layer, "num_ranks", i));
    DI_ASSIGN(placement.slots_per_rank, int_field(layer, "slots_per_rank", i));
    const auto slots = layer.find("physical_to_logical");
    if (slots == layer.end() || !slots->is_array()) {
      return Error{"expert placement: moe_layers[" + std::to_string(i) + "] needs a \"physical_to_logical\" array"};
    }
    for (const nlohmann::json& logical : *slots) {
      if (!logical.is_number_integer() || logical < std::numeric_limits<int32_t>::min() ||
          logical > std::numeric_limits<int32_t>::max()) {
        return Error{"expert placement: moe_layers[" + std::to_string(i) +
                     "].physical_to_logical holds a value that is not an expert id"};
      }
      placement.physical_to_logical.push_back(logical.get<int32_t>());
    }
    if (Result<void> valid = placement.validate(); !valid.ok()) {
      return Error{"moe_layers[" + std::to_string(i) + "]: " + valid.error().message};
    }
    placements.push_back(std::move(placement));
  }
  return placements;
}

Result<void> save_placements(const std::string& path, const std::vector<ExpertPlacement>& placements) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Error{"expert placement: cannot open " + path + " for writing"};
  out << placements_to_json(placements);
  if (!out.flush()) return Error{"expert placement: writing " + path + " failed"};
  return {};
}

Result<std::vector<ExpertPlacement>> load_placements(const std::string& path) {
  std::string text;
  DI_ASSIGN(text, read_text_file(path));
  Result<std::vector<ExpertPlacement>> placements = placements_from_json(text);
  if (!placements.ok()) return Error{path + ": " + placements.error().message};
  return placements;
}

}  // namespace deepinfer
