import FoundationEssentials
import Glibc

/// The system's words for what went wrong in a file operation of FoundationEssentials
/// (`No such file or directory`): the message of the POSIX error underneath, else the error's
/// own text.
public func systemMessage(of error: any Error) -> String {
    let code: Int32?
    switch error {
    case let error as CocoaError: code = (error.underlying as? POSIXError)?.code.rawValue
    case let error as POSIXError: code = error.code.rawValue
    default: code = nil
    }
    return code.map { String(cString: strerror($0)) } ?? "\(error)"
}
