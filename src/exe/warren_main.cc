// warren: the CLI and `warren serve`. One file per subcommand under src/cli/.
#include "cli/common.h"

int main(int argc, char** argv) {
  CLI::App app{"warren: sandboxes for training and evaluating AI agents"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all");
  warren::cli::AddServe(app);
  warren::cli::AddNode(app);
  warren::cli::AddApiServer(app);
  warren::cli::AddImage(app);
  warren::cli::AddCreate(app);
  warren::cli::AddExec(app);
  warren::cli::AddRun(app);
  warren::cli::AddLs(app);
  warren::cli::AddInspect(app);
  warren::cli::AddRm(app);
  warren::cli::AddCp(app);
  warren::cli::AddToken(app);
  warren::cli::AddPause(app);
  warren::cli::AddVnc(app);
  warren::cli::AddNet(app);
  warren::cli::AddFs(app);
  warren::cli::AddDiff(app);
  warren::cli::AddSnapshot(app);
  warren::cli::AddFork(app);
  warren::cli::AddCall(app);
  warren::cli::AddBlobfsd(app);
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) args.push_back(argv[i]);  // CLI11 wants them reversed
  for (size_t i = args.size(); i-- > 0;) {
    if (args[i] == "--") {
      // args is reversed: [0, i) is what followed the `--`.
      for (size_t k = i; k-- > 0;) warren::cli::CommandAfterDashes().push_back(args[k]);
      args.erase(args.begin(), args.begin() + static_cast<long>(i) + 1);
      break;
    }
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    fprintf(stderr, "warren: %s\n", e.what());
    return 2;
  }
  return warren::cli::ExitCode();
}
