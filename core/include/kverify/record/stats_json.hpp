/// @file stats_json.hpp
/// @brief JSON form of CompareStats (field names as in the struct; indices -1 for none).
#pragma once

#include <nlohmann/json.hpp>

#include "kverify/compare/stats.hpp"

namespace kverify::record {

using json = nlohmann::json;

/// Non-finite doubles (max_rel_err may be Inf) are written as the strings "inf"/"nan".
json number(double x);
double number_from(const json& j);

json to_json(const compare::CompareStats& s);
/// @throws nlohmann::json::exception naming the missing field.
compare::CompareStats stats_from_json(const json& j);

}  // namespace kverify::record
