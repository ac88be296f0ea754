#include "op_call.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/frontend/function_schema_parser.h>

#include <stdexcept>

#include "dump_file.h"

namespace probe::replay {
namespace {

// Ops that draw random numbers, some without a Generator argument (native_dropout).
bool random_op(const std::string& name) {
  if (name.ends_with("_backward")) return false;  // native_dropout_backward: a mask given
  static const char* kRandom[] = {"dropout",     "bernoulli", "rand",        "normal",    "uniform",
                                  "multinomial", "poisson",   "exponential", "geometric", "cauchy",
                                  "log_normal",  "random_",   "rrelu"};
  for (const char* r : kRandom)
    if (name.find(r) != std::string::npos) return true;
  return false;
}

bool is_scalar_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::ScalarTypeType) return true;
  if (auto opt = type->cast<c10::OptionalType>())
    return opt->getElementType()->kind() == c10::TypeKind::ScalarTypeType;
  return false;
}

// A Scalar or float argument: its magnitude is what an op on magnitudes takes (not an int: a dim).
bool is_number_type(const c10::TypePtr& type) {
  const auto k = type->kind();
  return k == c10::TypeKind::NumberType || k == c10::TypeKind::FloatType;
}

bool is_device_type(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::DeviceObjType) return true;
  if (auto opt = type->cast<c10::OptionalType>())
    return opt->getElementType()->kind() == c10::TypeKind::DeviceObjType;
  return false;
}

// A dumped value (lists as tuples) as the schema's type wants it, tensors through the policy.
struct Converter {
  const ArgPolicy& policy;
  std::size_t next_tensor = 0;

  at::Tensor tensor(const at::Tensor& t) {
    const std::size_t index = next_tensor++;
    return policy.tensor ? policy.tensor(index, t) : t;
  }

  c10::IValue list(const c10::IValue& v, const c10::TypePtr& elem) {
    const auto& items = v.toTupleRef().elements();
    const auto kind = elem->kind();
    if (kind == c10::TypeKind::TensorType) {
      c10::List<at::Tensor> out;
      for (const auto& e : items)
        out.push_back(tensor(is_undefined_tensor(e) ? at::Tensor() : e.toTensor()));
      return out;
    }
    if (auto opt = elem->cast<c10::OptionalType>();
        opt && opt->getElementType()->kind() == c10::TypeKind::TensorType) {
      c10::List<std::optional<at::Tensor>> out;
      for (const auto& e : items)
        out.push_back(e.isNone() ? std::nullopt
                                 : std::optional(tensor(is_undefined_tensor(e) ? at::Tensor()
                                                                               : e.toTensor())));
      return out;
    }
    if (kind == c10::TypeKind::IntType || kind == c10::TypeKind::SymIntType) {
      c10::List<std::int64_t> out;
      for (const auto& e : items) out.push_back(e.toInt());
      return out;
    }
    if (kind == c10::TypeKind::FloatType) {
      c10::List<double> out;
      for (const auto& e : items) out.push_back(e.toDouble());
      return out;
    }
    if (kind == c10::TypeKind::BoolType) {
      c10::List<bool> out;
      for (const auto& e : items) out.push_back(e.toBool());
      return out;
    }
    c10::impl::GenericList out(elem);
    for (const auto& e : items) out.push_back(value(e, elem));
    return out;
  }

  c10::IValue value(const c10::IValue& v, const c10::TypePtr& type) {
    if (v.isNone()) return v;
    if (v.isTensor()) return tensor(v.toTensor());
    if (is_undefined_tensor(v)) return tensor(at::Tensor());
    // Dumped by name; the replay runs on the host.
    if (v.isString() && is_device_type(type)) return c10::Device(c10::kCPU);
    const c10::TypePtr inner = type->kind() == c10::TypeKind::OptionalType
                                   ? type->castRaw<c10::OptionalType>()->getElementType()
                                   : type;
    if (v.isTuple() && inner->kind() == c10::TypeKind::ListType)
      return list(v, inner->castRaw<c10::ListType>()->getElementType());
    if (v.isTuple()) {
      std::vector<at::Tensor> tensors;  // count what it holds, in order
      flatten_tensors(v, tensors);
      next_tensor += tensors.size();
      return v;
    }
    if (policy.float64 && is_scalar_type(type) && v.isInt() &&
        c10::isFloatingType(static_cast<c10::ScalarType>(v.toInt())))
      return c10::IValue(static_cast<std::int64_t>(c10::ScalarType::Double));
    if (policy.abs_scalars && is_number_type(inner)) {
      if (v.isDouble()) return std::abs(v.toDouble());
      if (v.isInt()) return std::abs(v.toInt());
    }
    return v;
  }
};

}  // namespace

c10::FunctionSchema parse_schema(const std::string& text) {
  try {
    return torch::jit::parseSchema(text);
  } catch (const std::exception& e) {
    throw std::runtime_error("the schema '" + text +
                             "' does not parse: " + std::string(e.what()).substr(0, 200));
  }
}

std::string not_replayable_reason(const std::string& schema_text,
                                  const c10::FunctionSchema* schema) {
  if (schema_text.empty())
    return "it has no schema (a backward node's own call, not a dispatcher op)";
  if (!schema) return "its schema does not parse";
  for (const auto& a : schema->arguments())
    if (a.type()->kind() == c10::TypeKind::GeneratorType ||
        (a.type()->kind() == c10::TypeKind::OptionalType &&
         a.type()->castRaw<c10::OptionalType>()->getElementType()->kind() ==
             c10::TypeKind::GeneratorType))
      return "it is a random op (it takes a generator): a replay would draw other numbers";
  if (random_op(schema->name())) return "it is a random op: a replay would draw other numbers";
  return "";
}

std::vector<c10::IValue> call_op(const c10::FunctionSchema& schema,
                                 const std::vector<c10::IValue>& args, const ArgPolicy& policy,
                                 const std::string& name) {
  const std::string op_name = name.empty() ? schema.name() : name;
  const std::string& overload = schema.overload_name();
  const auto& params = schema.arguments();
  if (args.size() != params.size())
    throw std::runtime_error(op_name + ": the dump holds " + std::to_string(args.size()) +
                             " arguments, the schema " + std::to_string(params.size()));
  Converter convert{policy};
  torch::jit::Stack stack;
  for (std::size_t i = 0; i < args.size(); ++i) {
    // real_type: a ScalarType argument's type() is int.
    stack.push_back(convert.value(args[i], params[i].real_type()));
    // An in-place op writes into its argument: a copy, so the replay's other values stay.
    if (params[i].alias_info() && params[i].alias_info()->isWrite()) {
      if (stack.back().isTensor()) {
        stack.back() = stack.back().toTensor().clone();
      } else if (stack.back().isTensorList()) {
        c10::List<at::Tensor> copies;
        for (const at::Tensor& t : stack.back().toTensorVector())
          copies.push_back(t.defined() ? t.clone() : t);
        stack.back() = copies;
      }
    }
  }
  try {
    const auto op =
        c10::Dispatcher::singleton().findSchemaOrThrow(op_name.c_str(), overload.c_str());
    op.callBoxed(stack);
  } catch (const std::exception& e) {
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw std::runtime_error("replaying " + op_name + (overload.empty() ? "" : "." + overload) +
                             " failed: " + what);
  }
  return {stack.begin(), stack.end()};
}

at::Tensor output_tensor(const std::vector<c10::IValue>& outputs, std::size_t index) {
  std::vector<at::Tensor> tensors;
  for (const auto& v : outputs) flatten_tensors(v, tensors);
  return index < tensors.size() ? tensors[index] : at::Tensor();
}

}  // namespace probe::replay
