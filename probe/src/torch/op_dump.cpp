// Op dumps: what a replay needs of a traced op, in a form torch.load opens (op_dump.h). Built
// with NDEBUG, as op_trace.cpp: it reads a RecordFunction.
#include "op_dump.h"

#include <ATen/core/List.h>
#include <ATen/core/function_schema.h>
#include <ATen/record_function.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <sstream>

namespace probe::detail {

std::string schema_of(const at::RecordFunction& fn) {
  const auto schema = fn.operator_schema();
  if (!schema) return "";
  std::ostringstream text;
  text << *schema;
  return text.str();
}

c10::IValue dumpable(const c10::IValue& v) {
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    // An undefined tensor keeps its place among the op's tensors (the record's `in` counts it).
    if (!t.defined()) return c10::IValue(std::string(kUndefinedTensor));
    return t.detach().to(at::kCPU, /*non_blocking=*/false, /*copy=*/true);
  }
  if (v.isList() || v.isTuple()) {
    std::vector<c10::IValue> items;
    if (v.isList())
      for (const c10::IValue& e : v.toListRef()) items.push_back(dumpable(e));
    else
      for (const c10::IValue& e : v.toTupleRef().elements()) items.push_back(dumpable(e));
    return c10::ivalue::Tuple::create(std::move(items));
  }
  if (v.isGenerator()) return c10::IValue(std::string("<generator>"));
  if (v.isNone() || v.isInt() || v.isDouble() || v.isBool() || v.isString() || v.isComplexDouble())
    return v;
  if (v.isDevice()) return c10::IValue(v.toDevice().str());
  return c10::IValue("<" + v.tagKind() + ">");  // a type a replay cannot rebuild: said, not dropped
}

std::vector<char> dump_bytes(const std::string& schema, const std::string& name,
                             std::vector<c10::IValue> arguments,
                             const std::vector<c10::IValue>& outputs) {
  std::vector<c10::IValue> out;
  for (const c10::IValue& v : outputs) out.push_back(dumpable(v));
  return torch::jit::pickle_save(c10::ivalue::Tuple::create(
      {c10::IValue(schema), c10::IValue(name), c10::ivalue::Tuple::create(std::move(arguments)),
       c10::ivalue::Tuple::create(std::move(out))}));
}

DumpWriter::DumpWriter(std::filesystem::path rank_dir, std::int64_t cap_bytes)
    : rank_dir_(std::move(rank_dir)), cap_bytes_(cap_bytes) {}

void DumpWriter::stop(const std::string& why) {
  stopped_.store(true);
  std::fprintf(
      stderr,
      "numprobe: op dumps in %s stop: %s; the op records go on without dump=, training goes on\n",
      (rank_dir_ / "dumps").string().c_str(), why.c_str());
}

std::string DumpWriter::save(std::int64_t step, const std::function<std::vector<char>()>& bytes) {
  std::lock_guard lock(mutex_);
  if (stopped_.load()) return "";
  try {
    const std::vector<char> data = bytes();
    const auto size = static_cast<std::int64_t>(data.size());
    if (written_ + size > cap_bytes_) {
      stop("the next one (" + std::to_string(size) + " bytes, step " + std::to_string(step) +
           ") would pass dump_cap=" + std::to_string(cap_bytes_ >> 20) + " MiB (" +
           std::to_string(written_) + " bytes written)");
      return "";
    }
    const std::string relative =
        "dumps/step" + std::to_string(step) + "/" + std::to_string(count_) + ".pt";
    const std::filesystem::path path = rank_dir_ / relative;
    std::filesystem::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    out.close();
    if (!out) {
      stop("writing " + path.string() + " failed");
      return "";
    }
    written_ += size;
    ++count_;
    return relative;
  } catch (const std::exception& e) {
    stop(std::string("a dump failed: ") + e.what());
    return "";
  }
}

}  // namespace probe::detail
