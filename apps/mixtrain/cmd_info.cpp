// `mixtrain info`: version, detected CPU features, which implementation each GEMM dtype and each
// bulk conversion uses, thread count.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "mixtrain/core/cpu_features.h"
#include "mixtrain/kernels/gemm_info.h"
#include "mixtrain/kernels/matmul_precision.h"
#include "mixtrain/kernels/quantize.h"
#include "mixtrain/kernels/threads.h"
#include "mixtrain/numeric/convert.h"

namespace mixtrain::cli {

void register_info(CLI::App& app, GlobalOptions& g, std::vector<Command>& commands) {
  auto* sub = app.add_subcommand("info", "Show version, CPU features and the kernels in use");
  auto json_arg = std::make_shared<std::string>();
  add_json_option(sub, *json_arg, "The same");
  commands.push_back(
      {[sub] { return sub->parsed(); },
       [&g, json_arg, sub] {
         apply_global_options(g);
         const CpuFeatures& f = cpu_features();
         nlohmann::ordered_json j;
         j["version"] = MIXTRAIN_VERSION;
         j["cpu_features"] = {{"avx2", f.avx2},
                              {"fma", f.fma},
                              {"f16c", f.f16c},
                              {"avx512f", f.avx512f},
                              {"avx512_bf16", f.avx512_bf16},
                              {"avx512_fp16", f.avx512_fp16},
                              {"amx_bf16", f.amx_bf16}};
         j["threads"] = num_threads();
         j["force_reference"] = force_reference();
         j["onednn"] = onednn_version();
         j["gemm"] = {{"f32", gemm_impl_name(DType::f32)},
                      {"bf16", gemm_impl_name(DType::bf16)},
                      {"f16", gemm_impl_name(DType::f16)}};
         // How quantized inference's int8 GEMMs run (kernels/quantize.h; kept out of "gemm", which
         // the golden trajectories' machine fingerprint reads).
         j["gemm_s8"] = gemm_s8_route();
         // What an fp32 GEMM runs as under each --matmul-precision (kernels/matmul_precision.h).
         for (MatmulPrecision p : {MatmulPrecision::highest, MatmulPrecision::high, MatmulPrecision::medium})
           j["matmul_precision"][std::string(matmul_precision_name(p))] = matmul_precision_route(p);
         j["convert"] = {{"f32_to_bf16", f32_to_bf16_impl_name()},
                         {"f32_to_fp16", f32_to_fp16_impl_name()},
                         {"f32_to_e4m3", f32_to_fp8_e4m3_impl_name()}};
         j["build"] = {{"compiler", MIXTRAIN_BUILD_COMPILER},
                       {"flags", MIXTRAIN_BUILD_FLAGS},
                       {"sanitizers", MIXTRAIN_BUILD_SANITIZE != 0}};
         const std::string json = json_output(*sub, *json_arg);
         if (!json.empty()) {
           write_file_atomic(json, j.dump(2) + "\n");
           if (json == "-") return 0;
         }
         std::printf("mixtrain %s\n", MIXTRAIN_VERSION);
         std::printf("cpu features:");
         for (auto& [k, v] : j["cpu_features"].items())
           std::printf(" %s=%s", k.c_str(), v.get<bool>() ? "yes" : "no");
         std::printf("\nthreads: %d%s\n", num_threads(),
                     force_reference() ? " (reference kernels forced)" : "");
         std::printf("onednn: %s\n", onednn_version().c_str());
         std::printf("build: %s, %s%s\n", MIXTRAIN_BUILD_COMPILER, MIXTRAIN_BUILD_FLAGS,
                     MIXTRAIN_BUILD_SANITIZE ? ", ASan + UBSan" : "");
         for (auto& [k, v] : j["gemm"].items())
           std::printf("gemm %-4s: %s\n", k.c_str(), v.get<std::string>().c_str());
         std::printf("gemm s8  : %s\n", gemm_s8_route());
         for (auto& [k, v] : j["matmul_precision"].items())
           std::printf("matmul precision %-7s: %s\n", k.c_str(), v.get<std::string>().c_str());
         for (auto& [k, v] : j["convert"].items())
           std::printf("convert %s: %s\n", k.c_str(), v.get<std::string>().c_str());
         return 0;
       }});
}

}  // namespace mixtrain::cli
