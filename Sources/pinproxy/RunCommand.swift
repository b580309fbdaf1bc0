import ArgumentParser

/// `pinproxy run`: the daemon.
struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "run", abstract: "Run the proxy daemon.")
    @OptionGroup var options: ConfigOption
    func run() throws { throw ValidationError("not built yet") }
}

/// `pinproxy ca`: the local CA.
struct CACommand: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ca", abstract: "Print the local CA certificate's path and PEM.")
    @OptionGroup var options: ConfigOption
    func run() throws { throw ValidationError("not built yet") }
}
