// `syncline-launch privacy`: the accountant (job/privacy_accountant.h) on the command line. With
// --noise-multiplier Z it prints the epsilon that --steps T steps at --sampling-rate Q spend at
// --delta D; with --epsilon E instead, the smallest noise multiplier that keeps them within E.
// One JSON line on stdout, e.g.
//   {"epsilon":1.2586,"delta":1e-05,"noise_multiplier":4,"sampling_rate":0.01,"steps":10000,
//    "order":16,"accountant":"rdp-classic"}
// A bad flag or value exits with code 2 and says why.
//
// Thread-safety: stateless.
#ifndef SYNCLINE_LAUNCH_PRIVACY_COMMAND_H_
#define SYNCLINE_LAUNCH_PRIVACY_COMMAND_H_

#include <string>

namespace syncline {

// argv[0] is "privacy".
int RunPrivacyCommand(int argc, char** argv);

// Its flags as a markdown table, for docs/FLAGS.md.
std::string PrivacyFlagsMarkdown();

}  // namespace syncline

#endif  // SYNCLINE_LAUNCH_PRIVACY_COMMAND_H_
