#include "agent/py_marshal.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace warren::agent {

using nlohmann::json;

namespace {

void PutInt32(std::string* o, int32_t v) {
  uint32_t u = static_cast<uint32_t>(v);
  const char b[4] = {static_cast<char>(u), static_cast<char>(u >> 8), static_cast<char>(u >> 16),
                     static_cast<char>(u >> 24)};
  o->append(b, 4);
}

void PutLong(std::string* o, bool negative, uint64_t magnitude) {
  std::vector<uint16_t> digits;  // base 2**15, least significant first
  for (; magnitude; magnitude >>= 15) digits.push_back(static_cast<uint16_t>(magnitude & 0x7fff));
  o->push_back('l');
  const int32_t n = static_cast<int32_t>(digits.size());
  PutInt32(o, negative ? -n : n);
  for (uint16_t d : digits) o->append({static_cast<char>(d & 0xff), static_cast<char>(d >> 8)});
}

void PutBytes(std::string* o, char type, std::string_view s) {
  o->push_back(type);
  PutInt32(o, static_cast<int32_t>(s.size()));
  o->append(s);
}

}  // namespace

void PutMarshal(const json& v, std::string* o) {
  switch (v.type()) {
    case json::value_t::boolean:
      o->push_back(v.get<bool>() ? 'T' : 'F');
      return;
    case json::value_t::number_integer: {
      const int64_t x = v.get<int64_t>();
      if (x >= INT32_MIN && x <= INT32_MAX) {
        o->push_back('i');
        PutInt32(o, static_cast<int32_t>(x));
      } else {
        PutLong(o, x < 0, x < 0 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x));
      }
      return;
    }
    case json::value_t::number_unsigned: {
      const uint64_t x = v.get<uint64_t>();
      if (x <= INT32_MAX) {
        o->push_back('i');
        PutInt32(o, static_cast<int32_t>(x));
      } else {
        PutLong(o, false, x);
      }
      return;
    }
    case json::value_t::number_float: {
      const double d = v.get<double>();
      char b[8];
      memcpy(b, &d, 8);
      o->push_back('g');
      o->append(b, 8);
      return;
    }
    case json::value_t::string:
      PutBytes(o, 'u', v.get_ref<const std::string&>());
      return;
    case json::value_t::array:
      o->push_back('[');
      PutInt32(o, static_cast<int32_t>(v.size()));
      for (const json& item : v) PutMarshal(item, o);
      return;
    case json::value_t::object:
      o->push_back('{');
      for (const auto& [key, item] : v.items()) {
        PutBytes(o, 'u', key);
        PutMarshal(item, o);
      }
      o->push_back('0');
      return;
    default:
      o->push_back('N');
  }
}

void PutMarshalDict(const json& obj, std::string_view bytes_key, std::string_view bytes,
                    std::string* o) {
  o->push_back('{');
  if (obj.is_object())
    for (const auto& [key, item] : obj.items()) {
      PutBytes(o, 'u', key);
      PutMarshal(item, o);
    }
  if (!bytes_key.empty()) {
    PutBytes(o, 'u', bytes_key);
    PutBytes(o, 's', bytes);
  }
  o->push_back('0');  // TYPE_NULL: the dict's end
}

}  // namespace warren::agent
