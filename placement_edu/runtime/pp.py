"""placeholder"""
Pipeline = None
