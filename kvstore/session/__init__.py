"""The persistent session over one evicting cache: append messages and generate replies (`session`), a reply
driven token by token (`reply`), the conversation's rendering (`render`), sampling, batched decoding, teacher-forced
replay, saving and restoring (`persist`), what a turn gives back (`turn_stats`), its settings (`config`).
"""
