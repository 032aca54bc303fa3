#include "net/remote/call_frame.h"

#include <cstring>
#include <iterator>

#include "net/frame.h"
#include "net/wire_bytes.h"

namespace troupe::net {

namespace {

constexpr size_t kFixed = 40;

enum Tag : uint8_t { none = 0, false_ = 1, true_ = 2, integer = 3, real = 4, string = 5, tensor = 6, list = 7 };

[[noreturn]] void malformed(const std::string& what) { throw CommError("call frame: malformed: " + what); }

using wire::get;
using wire::put;

template <class T>
void append(std::vector<uint8_t>& out, T value) {
  out.resize(out.size() + sizeof(T));
  put<T>(out.data(), out.size() - sizeof(T), value);
}

void encode_value(const WireValue& v, std::vector<uint8_t>& out, std::vector<Tensor>& tensors, size_t depth) {
  if (depth > kMaxValueDepth)
    throw ValueError("to_value: nested deeper than " + std::to_string(kMaxValueDepth) + " lists");
  switch (v.kind()) {
    case WireValue::Kind::none: out.push_back(none); return;
    case WireValue::Kind::boolean: out.push_back(v.as_bool() ? true_ : false_); return;
    case WireValue::Kind::integer:
      out.push_back(integer);
      append<int64_t>(out, v.as_int());
      return;
    case WireValue::Kind::real:
      out.push_back(real);
      append<double>(out, v.as_real());
      return;
    case WireValue::Kind::string: {
      const std::string& s = v.as_string();
      if (s.size() > UINT32_MAX) throw ValueError("to_value: a string of " + std::to_string(s.size()) + " bytes");
      out.push_back(string);
      append<uint32_t>(out, static_cast<uint32_t>(s.size()));
      out.insert(out.end(), s.begin(), s.end());
      return;
    }
    case WireValue::Kind::tensor: {
      const Tensor& t = v.as_tensor();
      if (t.dim() > static_cast<int64_t>(kMaxFrameDims))
        throw ShapeError("remote call: cannot send " + t.meta().str() + ": at most " + std::to_string(kMaxFrameDims) +
                         " dims");
      out.push_back(tensor);
      out.push_back(static_cast<uint8_t>(t.dtype()));
      out.push_back(static_cast<uint8_t>(t.dim()));
      for (int64_t d : t.shape()) append<int64_t>(out, d);
      tensors.push_back(t);  // a part of its own, by reference: the link that sends it reads its bytes
      return;
    }
    case WireValue::Kind::list: {
      const WireValue::List& items = v.as_list();
      out.push_back(list);
      append<uint32_t>(out, static_cast<uint32_t>(items.size()));
      for (const WireValue& item : items) encode_value(item, out, tensors, depth + 1);
      return;
    }
  }
}

// Reads the value tree, checking every length against the bytes left.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, const std::vector<Tensor>& parts) : p_(data), end_(data + size), parts_(parts) {}

  WireValue value(size_t depth) {
    if (depth > kMaxValueDepth) malformed("lists nested deeper than " + std::to_string(kMaxValueDepth));
    const uint8_t tag = take<uint8_t>("a value tag");
    switch (tag) {
      case none: return WireValue();
      case false_: return WireValue::boolean(false);
      case true_: return WireValue::boolean(true);
      case integer: return WireValue::integer(take<int64_t>("an int"));
      case real: return WireValue::real(take<double>("a float"));
      case string: {
        const uint32_t n = take<uint32_t>("a string length");
        need(n, "a string");
        std::string s(reinterpret_cast<const char*>(p_), n);
        p_ += n;
        return WireValue::string(std::move(s));
      }
      case tensor: return WireValue::tensor(next_tensor());
      case list: {
        const uint32_t n = take<uint32_t>("a list length");
        need(n, "a list's items");  // every item takes at least one byte: bounds the allocation
        WireValue::List items;
        items.reserve(n);
        for (uint32_t i = 0; i < n; ++i) items.push_back(value(depth + 1));
        return WireValue::list(std::move(items));
      }
    }
    malformed("unknown value tag " + std::to_string(tag));
  }

  void finish() const {
    if (p_ != end_) malformed(std::to_string(end_ - p_) + " bytes after the value");
    if (next_part_ != parts_.size())
      malformed("the value names " + std::to_string(next_part_) + " tensors, " + std::to_string(parts_.size()) +
                " came");
  }

 private:
  void need(size_t n, const char* what) const {
    if (static_cast<size_t>(end_ - p_) < n)
      malformed(std::string(what) + " needs " + std::to_string(n) + " bytes, " + std::to_string(end_ - p_) + " left");
  }
  template <class T>
  T take(const char* what) {
    need(sizeof(T), what);
    const T value = get<T>(p_, 0);
    p_ += sizeof(T);
    return value;
  }

  Tensor next_tensor() {
    const uint8_t dtype = take<uint8_t>("a tensor dtype");
    if (dtype > static_cast<uint8_t>(DType::boolean)) malformed("unknown tensor dtype " + std::to_string(dtype));
    const uint8_t ndims = take<uint8_t>("a tensor rank");
    if (ndims > kMaxFrameDims)
      malformed("tensor rank " + std::to_string(ndims) + " exceeds " + std::to_string(kMaxFrameDims));
    const DType t = static_cast<DType>(dtype);
    Shape shape(ndims);
    uint64_t bytes = itemsize(t);
    for (auto& d : shape) {
      d = take<int64_t>("a tensor dim");
      if (d < 0) malformed("negative tensor dim " + std::to_string(d));
      if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes)) malformed("tensor shape overflows");
    }
    if (next_part_ >= parts_.size())
      malformed("tensor " + std::to_string(next_part_ + 1) + " named, " + std::to_string(parts_.size()) + " came");
    const Tensor& part = parts_[next_part_++];
    if (part.nbytes() != bytes)
      malformed(std::string(troupe::name(t)) + to_string(shape) + " needs " + std::to_string(bytes) + " bytes, its part has " +
                std::to_string(part.nbytes()));
    return view_bytes_as(part, t, shape);
  }

  const uint8_t* p_;
  const uint8_t* end_;
  const std::vector<Tensor>& parts_;
  size_t next_part_ = 0;
};

// What each kind must carry.
struct Rule {
  bool actor;      // a nonzero actor id
  int request;     // 1: nonzero, 0: zero, -1: either
  bool text;       // a nonempty text
  WireValue::Kind value;
};

Rule rule(CallKind kind) {
  using K = WireValue::Kind;
  switch (kind) {
    case CallKind::spawn: return {false, 1, true, K::list};
    case CallKind::request: return {true, 1, true, K::list};
    case CallKind::tell: return {true, 0, true, K::list};
    case CallKind::reply: return {false, 1, false, K::none};  // any value: checked by kind below
    case CallKind::failure: return {false, -1, true, K::none};  // request 0: a tell's, naming its actor
    case CallKind::enroll: return {true, 1, true, K::list};
    case CallKind::withdraw: return {false, 0, true, K::none};
    case CallKind::lookup: return {false, 1, true, K::none};
    case CallKind::stop: return {true, -1, false, K::none};
    case CallKind::monitor: return {true, 0, false, K::none};
    case CallKind::down: return {true, 0, false, K::none};
    case CallKind::serving: return {false, 0, false, K::none};
    case CallKind::done: return {false, 0, false, K::none};
  }
  return {};
}

}  // namespace

const char* name(CallKind kind) {
  static const char* names[] = {"?",       "spawn",  "request", "tell",    "reply", "failure", "enroll",
                                "withdraw", "lookup", "stop",    "monitor", "down",  "serving", "done"};
  auto i = static_cast<size_t>(kind);
  return i < std::size(names) ? names[i] : "unknown";
}

EncodedCall encode_call(const CallFrame& call) {
  EncodedCall out;
  if (call.text.size() > kMaxCallText)
    throw ValueError("remote call: a name of " + std::to_string(call.text.size()) + " bytes (at most " +
                     std::to_string(kMaxCallText) + ")");
  out.bytes.resize(kFixed + call.text.size());
  std::memcpy(out.bytes.data() + kFixed, call.text.data(), call.text.size());
  encode_value(call.value, out.bytes, out.tensors, 0);
  const size_t value_bytes = out.bytes.size() - kFixed - call.text.size();
  if (value_bytes > UINT32_MAX)
    throw ValueError("remote call: arguments of " + std::to_string(value_bytes) + " bytes besides their tensors");
  uint8_t* fixed = out.bytes.data();
  put<uint32_t>(fixed, 0, kCallMagic);
  put<uint8_t>(fixed, 4, kCallVersion);
  put<uint8_t>(fixed, 5, static_cast<uint8_t>(call.kind));
  put<uint16_t>(fixed, 6, 0);
  put<uint64_t>(fixed, 8, call.actor);
  put<uint64_t>(fixed, 16, call.request);
  put<uint32_t>(fixed, 24, static_cast<uint32_t>(call.text.size()));
  put<uint32_t>(fixed, 28, static_cast<uint32_t>(value_bytes));
  put<uint32_t>(fixed, 32, static_cast<uint32_t>(out.tensors.size()));
  put<uint32_t>(fixed, 36, call.generation);
  return out;
}

CallFrame decode_call(const void* data, size_t size, const std::vector<Tensor>& parts) {
  const auto* in = static_cast<const uint8_t*>(data);
  if (size < kFixed) malformed(std::to_string(size) + " bytes, at least " + std::to_string(kFixed) + " expected");
  if (get<uint32_t>(in, 0) != kCallMagic) malformed("bad magic (not a call frame)");
  if (const uint8_t v = get<uint8_t>(in, 4); v != kCallVersion)
    malformed("version " + std::to_string(v) + ", this build speaks " + std::to_string(kCallVersion));
  const uint8_t kind = get<uint8_t>(in, 5);
  if (kind < static_cast<uint8_t>(CallKind::spawn) || kind > static_cast<uint8_t>(CallKind::done))
    malformed("unknown kind " + std::to_string(kind));
  if (get<uint16_t>(in, 6) != 0) malformed("reserved bytes are not zero");
  CallFrame call;
  call.kind = static_cast<CallKind>(kind);
  call.actor = get<uint64_t>(in, 8);
  call.request = get<uint64_t>(in, 16);
  call.generation = get<uint32_t>(in, 36);
  const uint64_t text = get<uint32_t>(in, 24), value = get<uint32_t>(in, 28), tensors = get<uint32_t>(in, 32);
  if (text > kMaxCallText) malformed("text of " + std::to_string(text) + " bytes");
  if (kFixed + text + value != size)
    malformed(std::to_string(size) + " bytes, the header accounts for " + std::to_string(kFixed + text + value));
  if (tensors != parts.size())
    malformed("header names " + std::to_string(tensors) + " tensors, " + std::to_string(parts.size()) + " came");
  call.text.assign(reinterpret_cast<const char*>(in + kFixed), text);
  Reader reader(in + kFixed + text, value, parts);
  call.value = reader.value(0);
  reader.finish();

  const Rule r = rule(call.kind);
  const std::string what = std::string(name(call.kind)) + " ";
  if (r.actor && call.actor == 0) malformed(what + "without an actor id");
  if (r.request == 1 && call.request == 0) malformed(what + "without a request id");
  if (r.request == 0 && call.request != 0) malformed(what + "with a request id");
  if (call.kind == CallKind::failure && call.request == 0 && call.actor == 0)
    malformed(what + "without a request id or an actor id");
  if (r.text && call.text.empty()) malformed(what + "without a name");
  if (r.value != WireValue::Kind::none && call.value.kind() != r.value)
    malformed(what + "carrying " + call.value.describe());
  auto item_is = [&](size_t i, WireValue::Kind kind) { return call.value.as_list()[i].kind() == kind; };
  if (call.kind == CallKind::spawn &&
      (call.value.as_list().size() < 5 || call.value.as_list().size() > 6 ||  // 6: a respawn's snapshot
       !(item_is(0, WireValue::Kind::none) || item_is(0, WireValue::Kind::string)) ||
       !item_is(1, WireValue::Kind::list) || !item_is(2, WireValue::Kind::integer) || !item_is(3, WireValue::Kind::integer) ||
       !item_is(4, WireValue::Kind::string)))
    malformed("spawn carrying " + call.value.describe() +
              ", not [name, arguments, replaced rank, replaced id, device] (and a respawn's state)");
  if (call.kind == CallKind::enroll &&
      (call.value.as_list().size() != 3 || !item_is(0, WireValue::Kind::string) || !item_is(1, WireValue::Kind::integer) ||
       !item_is(2, WireValue::Kind::integer)))
    malformed("enroll carrying " + call.value.describe() + ", not [type, replaced rank, replaced id]");
  // A failure carries an error record; a down notice one too, or nothing (a plain stop).
  if ((call.kind == CallKind::failure || (call.kind == CallKind::down && !call.text.empty())) &&
      (call.text.find('\0') == std::string::npos || call.text.front() == '\0'))
    malformed(what + "without an error record");
  return call;
}

}  // namespace troupe::net
