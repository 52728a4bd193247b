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
// XLA: as TF Serving's model server, XLA:CPU compilation is off unless
// --xla_cpu_compilation_enabled true is given (the server's --xla_cpu_compilation_enabled=true);
// off, a function exported with jit_compile fails at its first run, as it does in the server.
//
// Load mode (bench/serving_load.py): --load_clients N runs the inputs as one request from N
// client threads at once, for --load_seconds S (after --load_warmup untimed runs), on the one
// session, as the server's request threads do; prints each request's latency. With
// --batch_max_size M the requests go through a batcher that does what TF Serving's
// BatchingSession does with a batching_parameters file: requests queue; a batch closes when it
// holds M rows or --batch_timeout_micros after its first request; --num_batch_threads batches
// run at once; the inputs are concatenated along dimension 0 (padded to the next of
// --allowed_batch_sizes with copies of the first row, as the server pads), run in one
// Session::Run and the outputs split back to the requests. With --output_dir, one more request
// after the load is answered through the same path and its outputs written as above.
//
// Compiled against the headers and libraries of the pip `tensorflow` wheel (see
// albert_tf/export/cc_loader.py). The wheel has no tag_constants.h, hence the literal "serve".

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <fstream>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tensorflow/c/c_api.h"
#include "tensorflow/cc/saved_model/loader.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor.pb.h"
#include "tensorflow/core/framework/tensor_util.h"
#include "tensorflow/core/protobuf/meta_graph.pb.h"
#include "tensorflow/core/public/session_options.h"

namespace tensorflow {
void DisableXlaCompilation();  // what the model server calls without --xla_cpu_compilation_enabled
}  // namespace tensorflow

namespace {

int Usage(const std::string& why) {
  std::cerr << "usage error: " << why << "\n"
            << "serving_loader --saved_model DIR [--op_library LIB.so ...] [--signature NAME] "
               "[--input NAME=FILE ...] [--output_dir DIR] "
               "[--xla_cpu_compilation_enabled true|false]\n";
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

using Clock = std::chrono::steady_clock;
using Feeds = std::vector<std::pair<std::string, tensorflow::Tensor>>;

struct Request {
  const Feeds* feeds;
  std::vector<tensorflow::Tensor>* outputs;  // this request's rows of each output, or null
  int64_t rows;
  Clock::time_point enqueued;
  std::promise<tensorflow::Status> done;
};

// TF Serving's batching, as its batching_parameters configure it (see the header comment).
class Batcher {
 public:
  Batcher(tensorflow::Session* session, std::vector<std::string> fetches, int64_t max_batch,
          int64_t timeout_us, std::vector<int64_t> allowed, int threads)
      : session_(session), fetches_(std::move(fetches)), max_batch_(max_batch),
        timeout_(timeout_us), allowed_(std::move(allowed)) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Loop(); });
  }
  ~Batcher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
  }
  tensorflow::Status Run(const Feeds& feeds, std::vector<tensorflow::Tensor>* outputs = nullptr) {
    auto request = std::make_shared<Request>();
    request->feeds = &feeds;
    request->outputs = outputs;
    request->rows = feeds.front().second.dim_size(0);
    request->enqueued = Clock::now();
    auto future = request->done.get_future();
    {
      std::lock_guard<std::mutex> lock(mu_);
      queued_rows_ += request->rows;
      queue_.push_back(request);
    }
    cv_.notify_all();
    return future.get();
  }
  int64_t batches() const { return batches_; }
  int64_t batched_rows() const { return batched_rows_; }
  int64_t padded_rows() const { return padded_rows_; }

 private:
  void Loop() {
    for (;;) {
      std::vector<std::shared_ptr<Request>> batch;
      int64_t rows = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        auto deadline = queue_.front()->enqueued + std::chrono::microseconds(timeout_);
        cv_.wait_until(lock, deadline,
                       [this] { return stop_ || queue_.empty() || queued_rows_ >= max_batch_; });
        while (!queue_.empty() && (batch.empty() || rows + queue_.front()->rows <= max_batch_)) {
          rows += queue_.front()->rows;
          queued_rows_ -= queue_.front()->rows;
          batch.push_back(queue_.front());
          queue_.pop_front();
        }
        if (batch.empty()) continue;
        batches_ += 1;
        batched_rows_ += rows;
      }
      cv_.notify_all();
      RunBatch(batch, rows);
    }
  }
  void RunBatch(const std::vector<std::shared_ptr<Request>>& batch, int64_t rows) {
    int64_t target = rows;
    for (int64_t size : allowed_)
      if (size >= rows) { target = size; break; }
    {
      std::lock_guard<std::mutex> lock(mu_);
      padded_rows_ += target - rows;
    }
    Feeds feeds;
    tensorflow::Status status;
    for (size_t i = 0; i < batch.front()->feeds->size() && status.ok(); ++i) {
      std::vector<tensorflow::Tensor> parts;
      for (const auto& request : batch) parts.push_back((*request->feeds)[i].second);
      for (int64_t k = rows; k < target; ++k) parts.push_back(parts.front().Slice(0, 1));
      tensorflow::Tensor joined;
      status = tensorflow::tensor::Concat(parts, &joined);
      feeds.emplace_back((*batch.front()->feeds)[i].first, joined);
    }
    std::vector<tensorflow::Tensor> outputs;
    if (status.ok()) status = session_->Run(feeds, fetches_, {}, &outputs);
    std::vector<int64_t> sizes;
    for (const auto& request : batch) sizes.push_back(request->rows);
    if (target > rows) sizes.push_back(target - rows);
    for (const auto& request : batch)
      if (request->outputs != nullptr) request->outputs->assign(outputs.size(), {});
    for (size_t j = 0; j < outputs.size() && status.ok(); ++j) {
      // each request's rows, as the server returns them
      const tensorflow::Tensor& output = outputs[j];
      std::vector<tensorflow::Tensor> pieces;
      bool batched = output.dims() > 0 && output.dim_size(0) == target;
      if (batched) status = tensorflow::tensor::Split(output, sizes, &pieces);
      for (size_t r = 0; r < batch.size() && status.ok(); ++r)
        if (batch[r]->outputs != nullptr) (*batch[r]->outputs)[j] = batched ? pieces[r] : output;
    }
    for (const auto& request : batch) request->done.set_value(status);
  }

  tensorflow::Session* session_;
  std::vector<std::string> fetches_;
  int64_t max_batch_, timeout_;
  std::vector<int64_t> allowed_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Request>> queue_;
  int64_t queued_rows_ = 0, batches_ = 0, batched_rows_ = 0, padded_rows_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// N client threads sending `feeds` as fast as answers come, for `seconds`.
int RunLoad(tensorflow::Session* session, const Feeds& feeds,
            const std::vector<std::string>& fetches, int clients, double seconds, int warmup,
            Batcher* batcher, std::vector<tensorflow::Tensor>* check_outputs) {
  auto run_one = [&]() -> tensorflow::Status {
    if (batcher != nullptr) return batcher->Run(feeds);
    std::vector<tensorflow::Tensor> outputs;
    return session->Run(feeds, fetches, {}, &outputs);
  };
  for (int i = 0; i < warmup; ++i) {
    tensorflow::Status status = run_one();
    if (!status.ok()) {
      std::cerr << "Session::Run failed: " << status.ToString() << "\n";
      return 1;
    }
  }
  std::vector<std::vector<int64_t>> latencies(clients);
  std::vector<tensorflow::Status> failures(clients);
  auto start = Clock::now();
  auto end = start + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      while (Clock::now() < end) {
        auto t0 = Clock::now();
        tensorflow::Status status = run_one();
        if (!status.ok()) {
          failures[c] = status;
          return;
        }
        latencies[c].push_back(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
      }
    });
  }
  for (auto& t : threads) t.join();
  double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  for (const auto& status : failures) {
    if (!status.ok()) {
      std::cerr << "Session::Run failed: " << status.ToString() << "\n";
      return 1;
    }
  }
  int64_t requests = 0;
  for (const auto& l : latencies) requests += l.size();
  if (check_outputs != nullptr) {  // one more request, its answer kept (batched when batching)
    tensorflow::Status status = batcher != nullptr ? batcher->Run(feeds, check_outputs)
                                                   : session->Run(feeds, fetches, {}, check_outputs);
    if (!status.ok()) {
      std::cerr << "Session::Run failed: " << status.ToString() << "\n";
      return 1;
    }
  }
  std::cout << "load clients " << clients << " requests " << requests << " rows_per_request "
            << feeds.front().second.dim_size(0) << " elapsed_s " << elapsed;
  if (batcher != nullptr)
    std::cout << " batches " << batcher->batches() << " batched_rows " << batcher->batched_rows()
              << " padded_rows " << batcher->padded_rows();
  std::cout << "\nlatencies_us";
  for (const auto& l : latencies)
    for (int64_t v : l) std::cout << " " << v;
  std::cout << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string saved_model, signature = "serving_default", output_dir;
  int load_clients = 0, load_warmup = 3, num_batch_threads = 1;
  bool xla_cpu_compilation_enabled = false;
  double load_seconds = 10;
  int64_t batch_max_size = 0, batch_timeout_micros = 0;
  std::vector<int64_t> allowed_batch_sizes;
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
    } else if (arg == "--load_clients") {
      load_clients = std::stoi(value);
    } else if (arg == "--load_seconds") {
      load_seconds = std::stod(value);
    } else if (arg == "--load_warmup") {
      load_warmup = std::stoi(value);
    } else if (arg == "--batch_max_size") {
      batch_max_size = std::stoll(value);
    } else if (arg == "--batch_timeout_micros") {
      batch_timeout_micros = std::stoll(value);
    } else if (arg == "--num_batch_threads") {
      num_batch_threads = std::stoi(value);
    } else if (arg == "--allowed_batch_sizes") {
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');)
        if (!item.empty()) allowed_batch_sizes.push_back(std::stoll(item));
    } else if (arg == "--xla_cpu_compilation_enabled") {
      if (value != "true" && value != "false")
        return Usage("--xla_cpu_compilation_enabled takes true or false");
      xla_cpu_compilation_enabled = value == "true";
    } else if (arg == "--input") {
      auto eq = value.find('=');
      if (eq == std::string::npos) return Usage("--input takes NAME=FILE");
      inputs.emplace_back(value.substr(0, eq), value.substr(eq + 1));
    } else {
      return Usage("unknown flag " + arg);
    }
  }
  if (saved_model.empty()) return Usage("--saved_model is required");
  if (!xla_cpu_compilation_enabled) tensorflow::DisableXlaCompilation();

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
  if (load_clients > 0) {
    std::unique_ptr<Batcher> batcher;
    if (batch_max_size > 0)
      batcher = std::make_unique<Batcher>(bundle.session.get(), fetches, batch_max_size,
                                          batch_timeout_micros, allowed_batch_sizes,
                                          num_batch_threads);
    std::vector<tensorflow::Tensor> check;
    int code = RunLoad(bundle.session.get(), feeds, fetches, load_clients, load_seconds,
                       load_warmup, batcher.get(), output_dir.empty() ? nullptr : &check);
    if (code != 0 || output_dir.empty()) return code;
    for (size_t i = 0; i < keys.size(); ++i) {
      tensorflow::TensorProto proto;
      check[i].AsProtoField(&proto);
      std::ofstream file(output_dir + "/" + keys[i] + ".pb", std::ios::binary);
      file << proto.SerializeAsString();
    }
    return 0;
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
