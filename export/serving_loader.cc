// Loads a SavedModel the way TensorFlow Serving does and runs one signature.
//
// TF Serving's SavedModelBundle path: tensorflow::LoadSavedModel with tag "serve" into a
// SavedModelBundle, input and output tensor names taken from the signature_def, then
// Session::Run. tensorflow-text's op libraries are loaded first with TF_LoadLibrary (the server
// links those ops in statically).
//
//   serving_loader --saved_model DIR [--op_library LIB.so ...] [--signature NAME]
//                  [--input NAME=TENSOR_PROTO_FILE ...] [--output_dir DIR]
//
// Prints the signature's method name, inputs and outputs (key, tensor name, dtype); with
// --output_dir, writes each output as a serialized TensorProto to DIR/<output key>.pb.
// Exit status: 0 ok, 1 load or run failure (message on stderr), 2 usage.
//
// Compiled against the headers and libraries of the pip `tensorflow` wheel (see
// export/cc_loader.py). The wheel has no tag_constants.h, hence the literal "serve".

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/public/session_options.h"

namespace {

int Usage(const std::string& why) {
  std::cerr << "usage error: " << why << "\n"
            << "serving_loader --saved_model DIR [--op_library LIB.so ...] [--signature NAME] "
               "[--input NAME=FILE ...] [--output_dir DIR]\n";
  return 2;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::ostringstream buffer;
  buffer << file.rdbuf();
  *out = buffer.str();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string saved_model, signature = "serving_default", output_dir;
  std::vector<std::string> libraries;
  std::vector<std::pair<std::string, std::string>> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc) return Usage("missing value after " + arg);
    std::string value = argv[++i];
    if (arg == "--saved_model") {
      saved_model = value;
    } else if (arg == "--op_library") {
      libraries.push_back(value);
    } else if (arg == "--signature") {
      signature = value;
    } else if (arg == "--output_dir") {
      output_dir = value;
    } else if (arg == "--input") {
      auto eq = value.find('=');
      if (eq == std::string::npos) return Usage("--input takes NAME=FILE");
      inputs.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else {
      return Usage("unknown flag " + arg);
    }
  }
  if (saved_model.empty()) return Usage("--saved_model is required");

  for (const auto& library : libraries) {
    TF_Status* status = TF_NewStatus();
    TF_Library* handle = TF_LoadLibrary(library.c_str(), status);
    if (TF_GetCode(status) != TF_OK) {
      std::cerr << "TF_LoadLibrary(" << library << ") failed: " << TF_Message(status) << "\n";
      TF_DeleteStatus(status);
      return 1;
    }
    (void)handle;  // kept loaded for the life of the process
    TF_DeleteStatus(status);
  }

  tensorflow::SavedModelBundle bundle;
  tensorflow::SessionOptions session_options;
  tensorflow::RunOptions run_options;
  tensorflow::Status status = tensorflow::LoadSavedModel(
      session_options, run_options, saved_model, {"serve"}, &bundle);
  if (!status.ok()) {
    std::cerr << "LoadSavedModel failed: " << status.ToString() << "\n";
    return 1;
  }
  const auto& signatures = bundle.meta_graph_def.signature_def();
  std::cout << "loaded " << saved_model << " with " << signatures.size() << " signatures\n";
  auto found = signatures.find(signature);
  if (found == signatures.end()) {
    std::cerr << "no signature " << signature << "\n";
    return 1;
  }
  const tensorflow::SignatureDef& def = found->second;
  std::cout << "signature " << signature << " method " << def.method_name() << "\n";
  for (const auto& in : def.inputs())
    std::cout << "input " << in.first << " " << in.second.name() << " "
              << tensorflow::DataType_Name(in.second.dtype()) << "\n";
  for (const auto& out : def.outputs())
    std::cout << "output " << out.first << " " << out.second.name() << " "
              << tensorflow::DataType_Name(out.second.dtype()) << "\n";
  if (inputs.empty()) return 0;

  std::vector<std::pair<std::string, tensorflow::Tensor>> feeds;
  for (const auto& [key, path] : inputs) {
    auto spec = def.inputs().find(key);
    if (spec == def.inputs().end()) {
      std::cerr << "signature " << signature << " has no input " << key << "\n";
      return 1;
    }
    std::string bytes;
    tensorflow::TensorProto proto;
    tensorflow::Tensor tensor;
    if (!ReadFile(path, &bytes) || !proto.ParseFromString(bytes) || !tensor.FromProto(proto)) {
      std::cerr << "cannot read a TensorProto from " << path << "\n";
      return 1;
    }
    feeds.emplace_back(spec->second.name(), tensor);
  }
  std::vector<std::string> keys, fetches;
  for (const auto& out : def.outputs()) {
    keys.push_back(out.first);
    fetches.push_back(out.second.name());
  }
  std::vector<tensorflow::Tensor> results;
  status = bundle.session->Run(feeds, fetches, {}, &results);
  if (!status.ok()) {
    std::cerr << "Session::Run failed: " << status.ToString() << "\n";
    return 1;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    std::cout << "result " << keys[i] << " " << results[i].shape().DebugString() << "\n";
    if (!output_dir.empty()) {
      tensorflow::TensorProto proto;
      results[i].AsProtoField(&proto);
      std::ofstream file(output_dir + "/" + keys[i] + ".pb", std::ios::binary);
      file << proto.SerializeAsString();
    }
  }
  return 0;
}
