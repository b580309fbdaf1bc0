import CPinproxyShims
import Glibc

/// pinproxy's own threads (each worker's event loop, the report sender), started with pthreads:
/// detached, with the default stack, named for `ps -L` and `top -H`.
public enum NamedThread {
    private final class Start {
        let name: String
        let body: @Sendable () -> Void

        init(name: String, body: @escaping @Sendable () -> Void) {
            self.name = name
            self.body = body
        }
    }

    /// Runs `body` on a new thread named `name` (the kernel keeps its first 15 bytes). A thread
    /// that cannot be made (the process's thread limit) ends the process: pinproxy cannot run
    /// without its workers.
    public static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        let start = Unmanaged.passRetained(Start(name: name, body: body))
        var thread = pthread_t()
        let error = pthread_create(&thread, nil, { argument in
            // The retain passed above, taken back once: argument is the Start given below.
            let start = Unmanaged<Start>.fromOpaque(argument!).takeRetainedValue()
            pp_set_thread_name(start.name)
            start.body()
            return nil
        }, start.toOpaque())
        guard error == 0 else {
            start.release()
            fatalError("cannot start the thread \(name): \(String(cString: strerror(error)))")
        }
        pthread_detach(thread)
    }
}
