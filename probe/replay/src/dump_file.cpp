#include "dump_file.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iterator>
#include <stdexcept>

namespace probe::replay {
namespace {

std::vector<c10::IValue> elements(const c10::IValue& v, const std::string& file, const char* what) {
  if (!v.isTuple()) throw std::runtime_error(file + ": not an op dump (" + what + " is no tuple)");
  const auto& e = v.toTupleRef().elements();
  return std::vector<c10::IValue>(e.begin(), e.end());
}

}  // namespace

DumpedOp load_dump(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error(file + ": cannot read the op dump");
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue v;
  try {
    v = torch::jit::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw std::runtime_error(file +
                             ": not a readable op dump: " + std::string(e.what()).substr(0, 200));
  }
  const auto top = elements(v, file, "the file");
  if (top.size() != 4 || !top[0].isString() || !top[1].isString())
    throw std::runtime_error(
        file + ": not an op dump (a tuple (schema, name, arguments, outputs) expected)");
  DumpedOp op;
  op.file = file;
  op.schema = top[0].toStringRef();
  op.name = top[1].toStringRef();
  op.args = elements(top[2], file, "the arguments");
  op.outputs = elements(top[3], file, "the outputs");
  return op;
}

bool is_undefined_tensor(const c10::IValue& v) {
  return v.isString() && v.toStringRef() == "<undefined>";
}

void flatten_tensors(const c10::IValue& v, std::vector<at::Tensor>& out) {
  if (is_undefined_tensor(v)) {
    out.emplace_back();
  } else if (v.isTensor()) {
    out.push_back(v.toTensor());
  } else if (v.isTuple()) {
    for (const auto& e : v.toTupleRef().elements()) flatten_tensors(e, out);
  } else if (v.isList()) {
    for (const auto& e : v.toListRef()) flatten_tensors(e, out);
  }
}

}  // namespace probe::replay
