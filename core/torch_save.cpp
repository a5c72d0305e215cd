// core/torch_save.cpp: a restricted reader of torch.save files (see torch_save.h).
#include "core/torch_save.h"

#include <cstring>
#include <fstream>
#include <map>
#include <memory>

#include "core/check.h"       // defines: TANDEM_CHECK, TANDEM_THROW
#include "core/zip_stored.h"  // defines: zip::Archive

namespace tandem::torch_save {

namespace {

// A pickle value. Containers are shared: the memo refers to the same dict that SETITEMS fills. The
// Unpickler's arena owns every value, so a pickle that puts a dict inside itself cannot leak it, and
// a deeply nested one is freed without recursion.
struct Value;
using Ptr = Value*;
struct Value {
  enum class Kind { None, Bool, Int, Float, Str, Tuple, List, Dict, Global, Storage, Tensor } kind = Kind::None;
  int64_t i = 0;                             // Bool, Int
  double f = 0;                              // Float
  std::string s;                             // Str; Global: "module.name"; Storage: its key
  std::vector<Ptr> items;                    // Tuple, List
  std::vector<std::pair<Ptr, Ptr>> entries;  // Dict, in insertion order
  DType dtype = DType::F32;                  // Storage
  const std::string* bytes = nullptr;        // Storage: its data (owned by the Unpickler)
  Tensor tensor;                             // Tensor
};

// The storage classes of a persistent id, and their dtypes.
const std::map<std::string, DType>& storage_types() {
  static const std::map<std::string, DType> m{
      {"torch.FloatStorage", DType::F32}, {"torch.DoubleStorage", DType::F64},  {"torch.HalfStorage", DType::F16},
      {"torch.BFloat16Storage", DType::BF16}, {"torch.LongStorage", DType::I64}, {"torch.IntStorage", DType::I32}};
  return m;
}
constexpr const char* kOrderedDict = "collections.OrderedDict";
constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";

class Unpickler {
 public:
  Unpickler(const zip::Archive& zip, std::string prefix, std::string pickle)
      : zip_(zip), prefix_(std::move(prefix)), p_(std::move(pickle)) {}

  Ptr run();

 private:
  const zip::Archive& zip_;
  std::string prefix_;  // "<archive>/"
  std::string p_;       // data.pkl
  size_t at_ = 0;
  std::vector<Ptr> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Ptr> memo_;
  std::map<std::string, std::string> storages_;  // key -> bytes, read once
  std::vector<std::unique_ptr<Value>> arena_;     // every value made

  Ptr make(Value::Kind k) {
    arena_.push_back(std::make_unique<Value>());
    arena_.back()->kind = k;
    return arena_.back().get();
  }

  [[noreturn]] void fail(const std::string& what) const {
    TANDEM_THROW("'", zip_.path, "': ", what, " (data.pkl byte ", at_, "). tandem reads state dicts only and runs none "
                 "of a pickle: save the state dict alone (torch.save(model.state_dict(), \"weights.pth\"))");
  }
  uint64_t take(int n) {  // n little-endian bytes
    if (p_.size() - at_ < static_cast<size_t>(n)) fail("the pickle ends early");
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p_[at_ + i]);
    at_ += n;
    return v;
  }
  std::string take_bytes(uint64_t n) {
    if (p_.size() - at_ < n) fail("a string runs past the end of the pickle");
    std::string s = p_.substr(at_, n);
    at_ += n;
    return s;
  }
  Ptr pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("the pickle pops an empty stack");
    Ptr v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<Ptr> pop_to_mark() {
    if (marks_.empty()) fail("the pickle closes a MARK it never opened");
    std::vector<Ptr> out(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()), stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return out;
  }
  Ptr tuple(std::vector<Ptr> items) {
    Ptr t = make(Value::Kind::Tuple);
    t->items = std::move(items);
    return t;
  }
  Ptr global(const std::string& module, const std::string& name);
  Ptr persistent(const Ptr& pid);
  Ptr reduce(const Ptr& callable, const Ptr& args);
  Ptr rebuild_tensor(const std::vector<Ptr>& a);
  void set_items(const Ptr& dict, const std::vector<Ptr>& kv);
};

Ptr Unpickler::global(const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  if (full != kOrderedDict && full != kRebuildTensor && full != kRebuildParameter && !storage_types().count(full)) {
    std::string hint;
    if (full.rfind("torch.", 0) == 0 && full.find("Storage") != std::string::npos)
      hint = "; tandem has tensors of f32, f64, f16, bf16, i64 and i32 only";
    fail("the pickle imports " + full + ", which is not part of a state dict" + hint);
  }
  Ptr g = make(Value::Kind::Global);
  g->s = full;
  return g;
}

Ptr Unpickler::persistent(const Ptr& pid) {
  // ("storage", torch.FloatStorage, "<key>", "<location>", numel), as torch.save writes it.
  const auto& it = pid->items;
  if (pid->kind != Value::Kind::Tuple || it.size() != 5 || it[0]->kind != Value::Kind::Str || it[0]->s != "storage" ||
      it[1]->kind != Value::Kind::Global || !storage_types().count(it[1]->s) || it[2]->kind != Value::Kind::Str)
    fail("a persistent id is not a tensor storage");
  const std::string& key = it[2]->s;
  if (!storages_.count(key)) storages_[key] = zip_.read(prefix_ + "data/" + key);
  Ptr s = make(Value::Kind::Storage);
  s->s = key, s->dtype = storage_types().at(it[1]->s), s->bytes = &storages_[key];
  if (s->bytes->size() % dtype_size(s->dtype) != 0)
    fail("storage " + key + " holds " + std::to_string(s->bytes->size()) + " bytes, not a whole number of " +
         dtype_name(s->dtype) + " elements");
  return s;
}

Ptr Unpickler::rebuild_tensor(const std::vector<Ptr>& a) {
  // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
  auto ints = [&](const Ptr& t, const char* what) {
    if (t->kind != Value::Kind::Tuple) fail(std::string("a tensor's ") + what + " is not a tuple");
    std::vector<int64_t> v;
    for (const Ptr& x : t->items) {
      if (x->kind != Value::Kind::Int || x->i < 0) fail(std::string("a tensor's ") + what + " holds a non-integer");
      v.push_back(x->i);
    }
    return v;
  };
  if (a.size() < 4 || a[0]->kind != Value::Kind::Storage || a[1]->kind != Value::Kind::Int || a[1]->i < 0)
    fail("a tensor is rebuilt from something other than a storage and an offset");
  const Value& st = *a[0];
  const Shape size = ints(a[2], "size");
  const std::vector<int64_t> stride = ints(a[3], "stride");
  if (size.size() != stride.size()) fail("a tensor's size and stride differ in length");
  const size_t elem = dtype_size(st.dtype);
  const uint64_t have = st.bytes->size() / elem;
  // The last element addressed must lie in the storage; and no more elements than it holds, so an
  // expanded (stride 0) view cannot turn a small file into a large allocation.
  // Each product is checked by division first, so no value from the file can overflow it.
  uint64_t numel = 1, last = static_cast<uint64_t>(a[1]->i);
  bool empty = false;
  for (size_t d = 0; d < size.size(); ++d) {
    const uint64_t n = static_cast<uint64_t>(size[d]), s = static_cast<uint64_t>(stride[d]);
    if (n == 0) {
      empty = true;
      continue;
    }
    if (numel > have / n) fail("a tensor has more elements than its storage (an expanded view: save .contiguous())");
    numel *= n;
    if (last > have || (s > 0 && n - 1 > (have - last) / s)) fail("a tensor addresses elements outside its storage");
    last += (n - 1) * s;
  }
  if (empty) numel = 0;
  if (numel > 0 && last >= have) fail("a tensor addresses elements outside its storage " + st.s);
  Tensor t = Tensor::empty(size, st.dtype);
  char* out = static_cast<char*>(t.data_ptr());
  const char* in = st.bytes->data();
  std::vector<int64_t> idx(size.size(), 0);
  for (uint64_t k = 0; k < numel; ++k) {  // row-major walk over the view
    uint64_t src = static_cast<uint64_t>(a[1]->i);
    for (size_t d = 0; d < size.size(); ++d) src += static_cast<uint64_t>(idx[d] * stride[d]);
    std::memcpy(out + k * elem, in + src * elem, elem);
    for (size_t d = size.size(); d-- > 0;) {
      if (++idx[d] < size[d]) break;
      idx[d] = 0;
    }
  }
  Ptr v = make(Value::Kind::Tensor);
  v->tensor = t;
  return v;
}

Ptr Unpickler::reduce(const Ptr& callable, const Ptr& args) {
  if (callable->kind != Value::Kind::Global || args->kind != Value::Kind::Tuple) fail("REDUCE calls a non-function");
  if (callable->s == kOrderedDict) {
    if (!args->items.empty()) fail("OrderedDict is built from arguments");
    return make(Value::Kind::Dict);
  }
  if (callable->s == kRebuildTensor) return rebuild_tensor(args->items);
  if (callable->s == kRebuildParameter) {
    if (args->items.empty() || args->items[0]->kind != Value::Kind::Tensor) fail("a Parameter without a tensor");
    return args->items[0];
  }
  fail("the pickle calls " + callable->s);
}

void Unpickler::set_items(const Ptr& dict, const std::vector<Ptr>& kv) {
  if (dict->kind != Value::Kind::Dict || kv.size() % 2 != 0) fail("SETITEMS on something other than a dict");
  for (size_t k = 0; k < kv.size(); k += 2) dict->entries.emplace_back(kv[k], kv[k + 1]);
}

Ptr Unpickler::run() {
  using K = Value::Kind;
  while (at_ < p_.size()) {
    const unsigned char op = static_cast<unsigned char>(p_[at_++]);
    switch (op) {
      case 0x80: take(1); break;                          // PROTO
      case 0x95: take(8); break;                          // FRAME (protocol 4): a length hint
      case '}': stack_.push_back(make(K::Dict)); break;   // EMPTY_DICT
      case ']': stack_.push_back(make(K::List)); break;   // EMPTY_LIST
      case ')': stack_.push_back(make(K::Tuple)); break;  // EMPTY_TUPLE
      case 'N': stack_.push_back(make(K::None)); break;   // NONE
      case 0x88: case 0x89: {                             // NEWTRUE, NEWFALSE
        Ptr b = make(K::Bool);
        b->i = op == 0x88;
        stack_.push_back(b);
        break;
      }
      case 'J': case 'K': case 'M': {  // BININT (int32), BININT1 (uint8), BININT2 (uint16)
        Ptr v = make(K::Int);
        v->i = op == 'J' ? static_cast<int32_t>(take(4)) : static_cast<int64_t>(take(op == 'K' ? 1 : 2));
        stack_.push_back(v);
        break;
      }
      case 0x8a: {  // LONG1: n little-endian two's-complement bytes
        const int n = static_cast<int>(take(1));
        if (n > 8) fail("an integer wider than 64 bits");
        uint64_t u = n ? take(n) : 0;
        if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~uint64_t{0} << (8 * n);  // sign-extend
        Ptr v = make(K::Int);
        v->i = static_cast<int64_t>(u);
        stack_.push_back(v);
        break;
      }
      case 'G': {  // BINFLOAT: big-endian double
        uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | static_cast<unsigned char>(take_bytes(1)[0]);
        Ptr v = make(K::Float);
        std::memcpy(&v->f, &u, 8);
        stack_.push_back(v);
        break;
      }
      case 'X': case 0x8c: {  // BINUNICODE (4-byte length), SHORT_BINUNICODE (1-byte, protocol 4)
        Ptr v = make(K::Str);
        v->s = take_bytes(take(op == 'X' ? 4 : 1));
        stack_.push_back(v);
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        const size_t a = p_.find('\n', at_), b = a == std::string::npos ? a : p_.find('\n', a + 1);
        if (b == std::string::npos) fail("a GLOBAL is cut short");
        const std::string module = p_.substr(at_, a - at_), name = p_.substr(a + 1, b - a - 1);
        at_ = b + 1;
        stack_.push_back(global(module, name));
        break;
      }
      case 'q': case 'r': case 0x94: {  // BINPUT, LONG_BINPUT, MEMOIZE
        const uint64_t key = op == 0x94 ? memo_.size() : take(op == 'q' ? 1 : 4);
        if (stack_.empty()) fail("the pickle memoizes an empty stack");
        memo_[key] = stack_.back();
        break;
      }
      case 'h': case 'j': {  // BINGET, LONG_BINGET
        auto it = memo_.find(take(op == 'h' ? 1 : 4));
        if (it == memo_.end()) fail("the pickle reads a memo entry it never wrote");
        stack_.push_back(it->second);
        break;
      }
      case '(': marks_.push_back(stack_.size()); break;  // MARK
      case 't': stack_.push_back(tuple(pop_to_mark())); break;
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        std::vector<Ptr> items(op - 0x84);
        for (size_t k = items.size(); k-- > 0;) items[k] = pop();
        stack_.push_back(tuple(std::move(items)));
        break;
      }
      case 'Q': stack_.push_back(persistent(pop())); break;  // BINPERSID
      case 'R': {                                             // REDUCE
        Ptr args = pop(), callable = pop();
        stack_.push_back(reduce(callable, args));
        break;
      }
      case 'b': {  // BUILD: an OrderedDict's attributes (a state dict's _metadata); dropped
        pop();
        if (stack_.empty() || stack_.back()->kind != K::Dict) fail("BUILD sets the state of an object");
        break;
      }
      case 'u': case 's': {  // SETITEMS (pairs since the MARK), SETITEM (one pair)
        std::vector<Ptr> kv;
        if (op == 'u') {
          kv = pop_to_mark();
        } else {
          Ptr value = pop(), key = pop();
          kv = {key, value};
        }
        if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back())) fail("SETITEMS without a dict");
        set_items(stack_.back(), kv);
        break;
      }
      case 'e': case 'a': {  // APPENDS, APPEND
        std::vector<Ptr> items = op == 'e' ? pop_to_mark() : std::vector<Ptr>{pop()};
        if (stack_.empty() || stack_.back()->kind != K::List) fail("APPEND to something other than a list");
        for (Ptr x : items) stack_.back()->items.push_back(x);
        break;
      }
      case '.': {  // STOP
        Ptr result = pop();
        if (!stack_.empty() || !marks_.empty()) fail("the pickle stops with values left on its stack");
        return result;
      }
      default:
        fail(std::string("pickle opcode 0x") + "0123456789abcdef"[op >> 4] + "0123456789abcdef"[op & 15] +
             " is not part of a state dict");
    }
  }
  fail("the pickle has no STOP");
}

}  // namespace

bool is_torch_zip(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char head[4] = {};
  f.read(head, 4);
  return f.gcount() == 4 && zip::looks_like_zip(std::string(head, 4));
}

safetensors::NamedTensors load(const std::string& path, std::string* wrapper) {
  return load_bytes(zip::open(path).bytes, path, wrapper);
}

safetensors::NamedTensors load_bytes(std::string bytes, const std::string& path, std::string* wrapper) {
  const zip::Archive zip = zip::open_bytes(std::move(bytes), path);
  // One <archive>/data.pkl; the archive folder is named after the file torch.save wrote first.
  std::string prefix;
  int pickles = 0;
  for (const zip::Entry& e : zip.entries) {
    const size_t slash = e.name.find('/');
    if (slash != std::string::npos && e.name.substr(slash) == "/data.pkl") prefix = e.name.substr(0, slash + 1), ++pickles;
  }
  TANDEM_CHECK(pickles == 1, "'", path, "' is a zip archive but not a torch.save file (", pickles, " <folder>/data.pkl "
               "entries, expected 1): save the state dict with torch.save(model.state_dict(), \"weights.pth\")");
  if (const zip::Entry* order = zip.find(prefix + "byteorder"))
    TANDEM_CHECK(zip.read(order->name) == "little", "'", path, "' was written on a big-endian machine; tandem reads "
                 "little-endian storages only");
  Unpickler u(zip, prefix, zip.read(prefix + "data.pkl"));
  const Ptr top = u.run();
  using K = Value::Kind;
  auto is_state_dict = [](const Ptr& d) {
    if (d->kind != K::Dict) return false;
    for (const auto& [k, v] : d->entries)
      if (k->kind != K::Str || v->kind != K::Tensor) return false;
    return true;
  };
  TANDEM_CHECK(top->kind == K::Dict, "'", path, "' holds a pickled object, not a dict of tensors: save the state dict "
               "with torch.save(model.state_dict(), \"weights.pth\")");
  Ptr sd = top;
  std::string taken;
  if (!is_state_dict(top)) {
    for (const char* name : {"state_dict", "model"})
      for (const auto& [k, v] : top->entries)
        if (taken.empty() && k->kind == K::Str && k->s == name && is_state_dict(v)) sd = v, taken = name;
    TANDEM_CHECK(!taken.empty(), "'", path, "' is a dict but not a state dict (a value is not a tensor), and it has "
                 "no \"model\" or \"state_dict\" entry that is one: save the model's state dict alone");
  }
  if (wrapper != nullptr) *wrapper = taken;
  safetensors::NamedTensors out;
  for (const auto& [k, v] : sd->entries) out.emplace_back(k->s, v->tensor);
  return out;
}

}  // namespace tandem::torch_save
